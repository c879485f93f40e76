"""A small, dependency-free client for `dsec-run serve`.

One long-lived `dsec-run serve` process per trainer: requests go to its
stdin as JSON Lines, answers come back on its stdout carrying the request's
rid, in the order they finish.  Every exec is given a seq, so a trainer
that is killed and restarted can send its commands again and get the
recorded results back ("replayed": true) instead of running them twice.
"""

import itertools
import json
import subprocess
import threading


class DsecError(RuntimeError):
    """An error record from dsec (its exit_code tells what kind)."""

    def __init__(self, record):
        super().__init__(record.get("error", "dsec failed"))
        self.record = record
        self.exit_code = record.get("exit_code")


class Serve:
    """A `dsec-run serve` subprocess, usable from many threads."""

    def __init__(self, program="dsec-run", env=None):
        self._proc = subprocess.Popen(
            [program, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, text=True, bufsize=1)
        self._rids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self._proc.stdout:
            answer = json.loads(line)
            rid = answer.get("rid")
            with self._lock:
                slot = self._waiting.get(rid)
            if slot is not None:
                slot["answers"].append(answer)
                slot["event"].set()
        # serve ended: wake everybody up
        with self._lock:
            for slot in self._waiting.values():
                slot["event"].set()

    def call(self, op, **fields):
        """Sends one request and returns its first answer (raises DsecError
        for an error record)."""
        rid = next(self._rids)
        slot = {"event": threading.Event(), "answers": []}
        with self._lock:
            self._waiting[rid] = slot
        request = dict(fields, op=op, rid=rid)
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        slot["event"].wait()
        with self._lock:
            del self._waiting[rid]
        if not slot["answers"]:
            raise DsecError({"error": "dsec-run serve ended"})
        answer = slot["answers"][0]
        if answer.get("type") == "error":
            raise DsecError(answer)
        return answer

    def close(self):
        """Closes stdin: serve finishes what is in flight and exits; the
        sandboxes live on."""
        self._proc.stdin.close()
        self._proc.wait()


class Sandbox:
    """One sandbox, with the seq counter a restarted trainer resumes."""

    def __init__(self, serve, sandbox_id, next_seq=1):
        self.serve = serve
        self.id = sandbox_id
        self.next_seq = next_seq

    @classmethod
    def create(cls, serve, **spec):
        record = serve.call("create", spec=spec)
        return cls(serve, record["id"])

    def exec(self, *cmd, stdin="", timeout_s=None, seq=None):
        """Runs cmd; returns the result record (see dsec-run(1))."""
        if seq is None:
            seq = self.next_seq
        self.next_seq = seq + 1
        fields = {"id": self.id, "cmd": list(cmd), "stdin": stdin, "seq": seq}
        if timeout_s is not None:
            fields["timeout_s"] = timeout_s
        return self.serve.call("exec", **fields)

    def checkpoint(self, name=None):
        fields = {"id": self.id}
        if name:
            fields["name"] = name
        return self.serve.call("checkpoint", **fields)

    def fork(self, count):
        return self.serve.call("fork", id=self.id, count=count)

    def rm(self):
        return self.serve.call("rm", id=self.id, force=True)
