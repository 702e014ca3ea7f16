"""Several hosts over OpenSSH: the inventory, the ssh transport and the remote commands. What runs on one
host (doctor, deploy) lives below and is imported from here, never the other way round."""
