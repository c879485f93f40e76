"""A rollout of 64 sandboxes that survives its own death, with the dsec
SDK's asyncio client (python/ of this tree, used without installing).

First life: creates the sandboxes, runs two steps in each, sends the third
step to all of them, and is killed at once (os._exit, as a preempted
trainer is), with those requests in flight.  Second life: attaches to the
same sandboxes and sends every step again with the same seq: what the
trajectory holds is answered from it ("replayed": true) and nothing runs
twice; a step that is still running when it is sent again (SequenceConflict,
"is running") is sent again once it has finished.  Then it goes on and
removes the sandboxes.

    python3 rollout.py IMAGE STATE             # first life (dies)
    python3 rollout.py IMAGE STATE --resume    # second life

STATE is a file of the first life's (the sandboxes' ids).  Each life
prints JSON lines: a "step" per answer, a "log" per sandbox at the end.
ROLLOUT_SANDBOXES sets how many sandboxes (default 64).
"""

import asyncio
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import dsec  # noqa: E402
import dsec.aio  # noqa: E402

N = int(os.environ.get("ROLLOUT_SANDBOXES", "64"))

# Each step logs its seq in /work/log: a step that ran twice would show.
STEPS = {
    1: "echo 1 >> log; head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
    2: "echo 2 >> log; wc -l < log",
    3: "echo 3 >> log; sleep 1; wc -l < log",
}


def emit(**rec):
    print(json.dumps(rec), flush=True)


def save(path, ids):
    """The state, written as dsec writes its own: temp, fsync, rename."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"ids": ids}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


async def step(i, sb, seq):
    """Sends step seq; when the first life's request of that seq is still
    running, waits for it and sends again (then it is replayed)."""
    deadline = time.monotonic() + 120
    waited = 0
    while True:
        try:
            r = await sb.exec(STEPS[seq], seq=seq, timeout=60)
            break
        except dsec.SequenceConflict as e:
            if "is running" not in str(e) or time.monotonic() > deadline:
                raise
            waited += 1
            await asyncio.sleep(0.05)
    emit(type="step", index=i, id=sb.id, seq=seq, stdout=r.stdout,
         replayed=r.replayed, waited=waited)
    return r


async def first_life(image, state):
    s = await dsec.aio.Serve().start()
    boxes = await asyncio.gather(*[
        s.create(image=image, workdir="/work", memory_mb=64, pids=64,
                 labels={"job": "rollout-example", "index": i})
        for i in range(N)])
    save(state, [b.id for b in boxes])

    async def run(i, sb):
        for seq in (1, 2):
            await step(i, sb, seq)
    await asyncio.gather(*[run(i, sb) for i, sb in enumerate(boxes)])
    # the third step goes out to every sandbox in one write ...
    await s.submit_many([{"op": "exec", "id": sb.id, "cmd": ["sh", "-c",
                                                             STEPS[3]],
                          "seq": 3, "timeout_s": 60} for sb in boxes])
    emit(type="sent", seq=3, count=N)
    # ... and the trainer is preempted: no answers, no cleanup
    os._exit(0)


async def second_life(image, state):
    with open(state) as f:
        ids = json.load(f)["ids"]
    async with dsec.aio.Serve() as s:
        boxes = [s.sandbox(i) for i in ids]

        async def run(i, sb):
            for seq in (1, 2, 3):
                await step(i, sb, seq)
            # and it goes on: each step ran exactly once
            r = await sb.exec(["cat", "log"], seq=4)
            emit(type="log", index=i, id=sb.id, stdout=r.stdout)
        await asyncio.gather(*[run(i, sb) for i, sb in enumerate(boxes)])
        await asyncio.gather(*[sb.remove() for sb in boxes])
        left = await s.sandboxes(all=True,
                                 labels={"job": "rollout-example"})
        emit(type="done", sandboxes=len(boxes), left=len(left))


def main(argv):
    if len(argv) == 3:
        asyncio.run(first_life(argv[1], argv[2]))
    elif len(argv) == 4 and argv[3] == "--resume":
        asyncio.run(second_life(argv[1], argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
