#!/usr/bin/env python3
"""Entry point of the testbed's test-engine image.

rigctl renders a vLLM command line for `engine.kind: vllm` (--model, --served-model-name,
--tensor-parallel-size, ...). The test engine has its own, smaller command line, so this shim
translates the flags it has an equivalent for, drops the ones that only matter on GPUs, passes
everything else through (the test engine's own flags, e.g. --warmup-seconds), and execs it.
The test engine also reads FAKE_VLLM_* variables, which a recipe can set in container.env.
"""

import os
import sys

ENGINE = "/opt/rigctl-test-engine/engine.py"
RENAME = {"--served-model-name": "--served-name"}
DROP_WITH_VALUE = {
    "--model", "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
    "--decode-context-parallel-size", "--speculative-config", "--gpu-memory-utilization", "--kv-cache-dtype",
    "--max-num-seqs", "--max-num-batched-tokens", "--attention-backend", "--dtype", "--quantization",
}
DROP_FLAG = {"--enable-expert-parallel", "--enable-prefix-caching", "--trust-remote-code",
             "--disable-custom-all-reduce", "--enforce-eager"}


def translate(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in DROP_FLAG:
            i += 1
        elif name in DROP_WITH_VALUE:
            i += 1 if eq else 2
        elif name in RENAME:
            out += [RENAME[name] + eq + value] if eq else [RENAME[name]]
            i += 1
        else:
            out.append(arg)
            i += 1
    return out


if __name__ == "__main__":
    args = translate(sys.argv[1:])
    os.execv(sys.executable, [sys.executable, "-u", ENGINE, *args])
