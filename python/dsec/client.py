"""The threaded client: one `dsec-run serve` per Serve, usable from any
number of threads.

A request is written whole (one write per request, or per batch with
submit_many) under a lock; one reader thread reads serve's answers and
hands each to the request of its rid, so a thread waits only for its own
answers and never behind another's.
"""

import itertools
import json
import os
import queue
import subprocess
import threading

from . import protocol as P
from .errors import Error, ServeClosed

__all__ = ["Serve", "Sandbox", "Session", "Pending"]

_CLOSED = object()


def _environ(env):
    """The environment for dsec-run: ours, with env's variables set (and
    those whose value is None removed)."""
    if env is None:
        return None
    out = dict(os.environ)
    for key, value in env.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


class Pending:
    """A request sent and not necessarily answered yet (see Serve.submit)."""

    __slots__ = ("_call", "_q", "_serve", "records", "_done", "_error")

    def __init__(self, serve, call):
        self._serve = serve
        self._call = call
        self._q = queue.SimpleQueue()
        #: the answer records received so far (and taken by result())
        self.records = []
        self._done = False
        self._error = None

    @property
    def rid(self):
        return self._call.rid

    def _next(self, timeout=None):
        """The next answer record and whether it is the last."""
        try:
            rec, final = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no answer to request %r within %ss"
                               % (self._call.rid, timeout)) from None
        if rec is _CLOSED:
            self._done = True
            self._error = self._serve._closed_error()
            raise self._error
        self.records.append(rec)
        if final:
            self._done = True
        return rec, final

    def done(self):
        """Whether every answer has been received."""
        return self._done

    def result(self, timeout=None):
        """Waits for the last answer and returns it; raises the Error of an
        error record, ServeClosed when serve ended first, TimeoutError
        after timeout seconds (the request stays in flight)."""
        while not self._done:
            self._next(timeout)
        if self._error is not None:
            raise self._error
        return P.check(self.records[-1])


class Serve:
    """One `dsec-run serve` process.

    program: the dsec-run to run (default "dsec-run", looked up in PATH);
    env: variables to set in its environment (DSEC_ROOT, DSEC_RUN,
    DSEC_STORE ...; None as a value removes one), over this process's;
    cwd: its working directory; stderr: where its diagnostics go (default:
    this process's standard error); args: more arguments after "serve".

    Use it as a context manager, or call close(): that closes serve's
    standard input, and serve exits once the requests in flight are
    answered.  The sandboxes live on.
    """

    def __init__(self, program="dsec-run", env=None, cwd=None, stderr=None,
                 args=()):
        self.program = program
        self._env = _environ(env)
        self._proc = subprocess.Popen(
            [program, "serve"] + list(args), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=stderr, env=self._env, cwd=cwd)
        self._rids = itertools.count(1)
        self._lock = threading.Lock()     # _calls, _lines, _closed
        self._wlock = threading.Lock()    # writes to stdin, _lineno
        self._calls = {}
        self._lines = {}
        self._lineno = 0
        self._closed = False
        self._returncode = None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="dsec-serve-reader")
        self._reader.start()

    # ---- transport

    @property
    def pid(self):
        """serve's process id."""
        return self._proc.pid

    @property
    def returncode(self):
        """serve's exit status once it has ended, else None."""
        return self._returncode

    def _closed_error(self):
        rc = self._returncode
        how = ("killed by signal %d" % -rc if rc is not None and rc < 0
               else "exit status %s" % rc if rc is not None else "closed")
        return ServeClosed("dsec-run serve ended (%s)" % how, rc)

    def _read(self):
        stdout = self._proc.stdout
        try:
            for line in stdout:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                with self._lock:
                    rid = rec.get("rid")
                    if rid is None:
                        rid = self._lines.get(P.answered_line(rec))
                    try:
                        pending = self._calls.get(rid)
                    except TypeError:  # a rid that is not ours
                        pending = None
                    if pending is None:
                        # answers to a request nobody waits for any more
                        # (e.g. the summary error after a fork's records)
                        continue
                    final = pending._call.final(rec)
                    if final:
                        del self._calls[rid]
                        self._lines.pop(pending._call.line, None)
                pending._q.put((rec, final))
        finally:
            stdout.close()
            returncode = self._proc.wait()
            with self._lock:
                self._returncode = returncode
                self._closed = True
                left = list(self._calls.values())
                self._calls.clear()
                self._lines.clear()
            for pending in left:
                pending._q.put((_CLOSED, True))

    def _send(self, requests):
        """Writes requests (a list of (fields, kind, count)) in one write;
        returns their Pendings."""
        pendings, data = [], []
        for fields, kind, count in requests:
            call = P.Call(next(self._rids), kind, count)
            data.append(P.encode(dict(fields, rid=call.rid)))
            pendings.append(Pending(self, call))
        with self._wlock:
            with self._lock:
                if self._closed or self._proc.stdin.closed:
                    raise self._closed_error()
                for p in pendings:
                    self._lineno += 1
                    p._call.line = self._lineno
                    self._calls[p._call.rid] = p
                    self._lines[self._lineno] = p._call.rid
            try:
                self._proc.stdin.write(b"".join(data))
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                with self._lock:
                    for p in pendings:
                        self._calls.pop(p._call.rid, None)
                        self._lines.pop(p._call.line, None)
                # serve is gone or going: its exit status for the error
                self._reader.join(10)
                raise self._closed_error() from None
        return pendings

    def _forget(self, pending):
        """Stops waiting for the answers of pending (an iteration given
        up, or answered by a serve that does not stream)."""
        with self._lock:
            if self._calls.get(pending._call.rid) is pending:
                del self._calls[pending._call.rid]
                self._lines.pop(pending._call.line, None)

    def submit(self, op, **fields):
        """Sends one request {"op": op, **fields} and returns its Pending
        at once."""
        return self._send([(dict(fields, op=op), P.ONE, 1)])[0]

    def submit_many(self, requests):
        """Sends several requests (dicts with "op") in one write; returns
        their Pendings, in order."""
        return self._send([(dict(r), P.ONE, 1) for r in requests])

    def call(self, op, **fields):
        """Sends one request and returns its answer (a dict); raises the
        Error of an error answer."""
        return self.submit(op, **fields).result()

    def close(self):
        """Closes serve's standard input and waits for it to answer what
        is in flight and exit; returns its exit status."""
        with self._wlock:
            if not self._proc.stdin.closed:
                try:
                    self._proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
        self._reader.join()
        return self._returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- sandboxes

    def create(self, spec=None, **kw):
        """Creates a sandbox (see dsec.protocol.spec_of for the keywords);
        returns its Sandbox."""
        rec = self.call("create", spec=P.spec_of(spec, **kw))
        return Sandbox(self, rec["id"], rec)

    def sandbox(self, id_or_name):
        """The Sandbox of an existing sandbox, without asking serve."""
        return Sandbox(self, id_or_name)

    def sandboxes(self, all=False, labels=None):
        """The sandboxes of the store (with all, also those that ended),
        those with every label in labels if given, as Sandboxes whose
        .record is the ps record."""
        rec = self.call("ps", all=bool(all))
        out = []
        for r in rec.get("sandboxes", []):
            have = r.get("labels") or {}
            if labels and any(have.get(k) != v for k, v in labels.items()):
                continue
            out.append(Sandbox(self, r["id"], r))
        return out

    def _events(self, sandbox_id):
        env = dict(self._env if self._env is not None else os.environ)
        env["DSEC_LOG_FORMAT"] = "json"
        proc = subprocess.run([self.program, "events", sandbox_id],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env)
        if proc.returncode != 0:
            raise P.events_error(proc.returncode, proc.stderr)
        return P.events_of(proc.stdout)


class Sandbox:
    """A sandbox, through its Serve.  .id is its id (or the name it was
    given), .record the last record serve gave about it."""

    def __init__(self, serve, sandbox_id, record=None):
        self.serve = serve
        self.id = sandbox_id
        self.record = record if record is not None else {"id": sandbox_id}

    def __repr__(self):
        return "Sandbox(%r)" % self.id

    def __enter__(self):
        return self

    def __exit__(self, etype, value, tb):
        try:
            self.remove(force=True)
        except Error:
            if etype is None:
                raise

    def exec(self, cmd, seq=None, timeout=None, stdin=None, env=None,
             workdir=None, max_output=None, exclusive=None, service=None,
             **extra):
        """Runs cmd (a list of strings; a string runs with sh -c) and
        returns its Result.  seq: the trajectory's sequence number (a
        seq already recorded is answered from the record, replayed);
        timeout: seconds; stdin: text or UTF-8 bytes; env, workdir: for
        this exec; max_output: bytes kept of each stream; extra: more
        request fields."""
        rec = self.serve.call("exec", **P.exec_fields(
            self.id, P.command(cmd), seq, timeout, stdin, env, workdir,
            max_output, exclusive, service, extra))
        return P.result(rec)

    def stream(self, cmd, seq=None, timeout=None, stdin=None, env=None,
               workdir=None, max_output=None, exclusive=None, service=None,
               **extra):
        """Sends cmd as exec does, at once, and returns an iterator over
        its output as it comes (Output records), then its Result."""
        fields = P.exec_fields(self.id, P.command(cmd), seq, timeout, stdin,
                               env, workdir, max_output, exclusive, service,
                               extra)
        fields["stream"] = True
        pending = self.serve._send([(dict(fields, op="exec"), P.STREAM,
                                     1)])[0]
        return self._stream(pending)

    def _stream(self, pending):
        first = True
        try:
            while True:
                rec, final = pending._next()
                item = P.stream_record(rec, first)
                first = False
                yield item
                if final:
                    return
        finally:
            self.serve._forget(pending)

    def session(self, name="main"):
        """The persistent shell NAME of this sandbox (created by its first
        command)."""
        return Session(self, name)

    def sessions(self):
        """The sandbox's sessions, as Sessions whose .record is serve's."""
        rec = self.serve.call("sessions", id=self.id)
        return [Session(self, s["name"], s) for s in rec.get("sessions", [])]

    def upload(self, src, dst, archive=None, seq=None):
        """Copies the host's src (a file, or a directory) to dst in the
        sandbox; returns the "copied" record (bytes, files, digest)."""
        return self._copy("upload", P.host_path(src), dst, archive, seq)

    def download(self, src, dst, archive=None, seq=None):
        """Copies src in the sandbox to the host's dst; returns the
        "copied" record."""
        return self._copy("download", src, P.host_path(dst), archive, seq)

    def _copy(self, op, src, dst, archive, seq):
        fields = {"id": self.id, "src": src, "dst": dst}
        if archive is not None:
            fields["archive"] = bool(archive)
        if seq is not None:
            fields["seq"] = seq
        return self.serve.call(op, **fields)

    def fork(self, count=1):
        """count new sandboxes from this one's current state, as a list of
        Sandboxes.  When some fail, raises Failure with .forked (the
        Sandboxes that were made) and .errors."""
        if not isinstance(count, int) or not 1 <= count <= 1024:
            raise ValueError("fork: count must be 1 to 1024")
        pending = self.serve._send([({"op": "fork", "id": self.id,
                                      "count": count}, P.FORK, count)])[0]
        while not pending.done():
            pending._next()
        kids, errors = P.forked(pending.records)
        kids = [Sandbox(self.serve, r["id"], r) for r in kids]
        if errors:
            raise P.fork_error(errors, kids)
        return kids

    def _op(self, op, **fields):
        rec = self.serve.call(op, id=self.id, **fields)
        if rec.get("type") == "sandbox":
            self.record = rec
        return rec

    def inspect(self):
        """The sandbox's inspect record (a dict)."""
        return self._op("inspect")

    def checkpoint(self, name=None):
        """Commits the writable layer as a layer (tagged name if given);
        returns the checkpoint record."""
        return self._op("checkpoint", **({"name": name} if name else {}))

    def suspend(self, release=False):
        """Freezes the sandbox (release: checkpoint it and free its
        processes, memory and CPU)."""
        return self._op("suspend", **({"release": True} if release else {}))

    def resume(self):
        return self._op("resume")

    def kill(self, signal=None):
        """Signals the sandbox's exec processes (signal: a name or number,
        default KILL)."""
        return self._op("kill", **({"signal": str(signal)}
                                   if signal is not None else {}))

    def remove(self, force=False):
        """Removes the sandbox."""
        return self._op("rm", **({"force": True} if force else {}))

    def events(self):
        """The sandbox's audit events (a list of dicts), from `dsec-run
        events`."""
        return self.serve._events(self.id)


class Session:
    """A persistent shell in a sandbox: its working directory, variables
    and functions carry from one run to the next."""

    def __init__(self, sandbox, name, record=None):
        self.sandbox = sandbox
        self.name = name
        self.record = record if record is not None else {"name": name}

    def __repr__(self):
        return "Session(%r, %r)" % (self.sandbox.id, self.name)

    def run(self, line, seq=None, timeout=None, stdin=None, env=None,
            workdir=None, max_output=None, **extra):
        """Runs one shell command line in the session; returns its Result
        (.session_lost when the shell had to be killed)."""
        if not isinstance(line, str):
            raise TypeError("a session runs one command line (a str)")
        rec = self.sandbox.serve.call("exec", session=self.name,
                                      **P.exec_fields(
                                          self.sandbox.id, [line], seq,
                                          timeout, stdin, env, workdir,
                                          max_output, None, None, extra))
        return P.result(rec, session=self.name)

    def remove(self):
        """Ends the session's shell."""
        return self.sandbox.serve.call("session_rm", id=self.sandbox.id,
                                       name=self.name)
