from rigctl.cli.app import main

main()
