"""A rollout loop that survives its own death.

It creates a sandbox through `dsec-run serve`, runs a few non-idempotent
commands (each with a seq), checkpoints, and is then killed mid-rollout
(os._exit, as a preempted trainer would be).  Started again with the
sandbox's id, it re-sends the same commands: dsec answers them from the
trajectory ("replayed": true) and nothing runs twice, then the rollout
goes on.

    python3 rollout.py IMAGE            # first life: prints the id, dies
    python3 rollout.py IMAGE --resume ID
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsec_client import Serve, Sandbox  # noqa: E402

STEPS = [
    # each step counts its own runs in /work/count: a re-run would show
    ["sh", "-c", "n=$(cat /work/count 2>/dev/null || echo 0); "
                 "echo $((n+1)) > /work/count; cat /work/count"],
    ["sh", "-c", "head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n'"],
    ["sh", "-c", "echo solution > /work/answer; rm /work/answer && echo gone"],
]


def first_life(image):
    serve = Serve()
    box = Sandbox.create(serve, image=image, workdir="/work")
    print(json.dumps({"type": "sandbox", "id": box.id}), flush=True)
    for step in STEPS:
        result = box.exec(*step)
        print(json.dumps({"type": "step", "seq": result["seq"],
                          "stdout": result["stdout"],
                          "replayed": result["replayed"]}), flush=True)
    box.checkpoint()
    # preempted: no cleanup, no goodbye
    os._exit(0)


def second_life(image, sandbox_id):
    serve = Serve()
    box = Sandbox(serve, sandbox_id)
    # a restarted trainer re-sends its first commands
    for step in STEPS:
        result = box.exec(*step)
        print(json.dumps({"type": "step", "seq": result["seq"],
                          "stdout": result["stdout"],
                          "replayed": result["replayed"]}), flush=True)
    # and goes on: the counter shows each step ran exactly once
    result = box.exec("cat", "/work/count")
    print(json.dumps({"type": "count", "stdout": result["stdout"],
                      "replayed": result["replayed"]}), flush=True)
    box.rm()
    serve.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--resume":
        second_life(sys.argv[1], sys.argv[3])
    elif len(sys.argv) == 2:
        first_life(sys.argv[1])
    else:
        sys.exit(__doc__)
