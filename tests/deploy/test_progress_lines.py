"""Engines draw progress bars with carriage returns (tqdm, as vLLM's shard loader does): every redraw is
output, so a long load that only redraws its bar is progress, not a stall, and its x/N is read."""

from __future__ import annotations

from rigctl.adapters.lines import ProcLines
from rigctl.deploy.warmup import Phase, PhaseState, parse_phase

BAR = (
    "Loading safetensors checkpoint shards:   0% Completed | 0/120 [00:00<?, ?it/s]\r"
    "Loading safetensors checkpoint shards:  45% Completed | 54/120 [01:02<01:15,  1.1s/it]\r"
    "Loading safetensors checkpoint shards: 100% Completed | 120/120 [02:19<00:00,  1.2s/it]\n"
)


def test_carriage_return_redraws_arrive_as_lines() -> None:
    stream = ProcLines(["printf", "%s", BAR])
    try:
        lines = list(stream)
    finally:
        stream.close()
    assert len(lines) == 3
    state = PhaseState(Phase.STARTING)
    seen = []
    for line in lines:
        state = parse_phase(line, state)
        seen.append(state.label())
    assert seen[-1].endswith("120/120")
    assert state.phase is Phase.LOADING
    assert state.progress == (120, 120)
    assert parse_phase(lines[1], PhaseState(Phase.STARTING)).progress == (54, 120)
