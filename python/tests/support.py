"""Shared by the SDK's tests: the dsec programs of the build tree, a private
store (DSEC_ROOT, DSEC_RUN) with busybox:1 in it, and the cleanup every
test must do: every sandbox of the store removed, and no cgroup or process
of them left (tests/helpers/run.bash does the same for the bats files).

Environment: DSEC_SRCDIR and DSEC_BUILDDIR (make check sets them; by
default the tree this file is in).
"""

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("DSEC_SRCDIR") or os.path.dirname(
    os.path.dirname(HERE))
BUILDDIR = os.environ.get("DSEC_BUILDDIR") or SRCDIR
sys.path.insert(0, os.path.join(SRCDIR, "python"))

import dsec  # noqa: E402

# the scratch directory of this test run (tap.py sets it and removes it)
SCRATCH = os.environ.get("DSEC_PY_SCRATCH") or tempfile.gettempdir()

_PROCS = ("dsec-supervise", "dsec-init", "dsec-run", "dsec-vm",
          "qemu-system-x86")


def _bin_dir():
    """The programs, copied under the lock builds take, so that a rebuild
    during the run does not pull them from under the tests (as the bats
    files' run_file_setup)."""
    bin_dir = os.path.join(SCRATCH, "bin")
    if os.path.isdir(bin_dir):
        return bin_dir
    os.makedirs(bin_dir)
    for p in ("dsec-run", "dsec-vm", "dsec-agent", "dsec-pull", "dsec-layer"):
        src = os.path.join(BUILDDIR, p)
        if not os.path.exists(src):
            continue
        cmd = ["cp", src, os.path.join(bin_dir, p)]
        if shutil.which("flock"):
            cmd = ["flock", "/tmp/dsec-make.lock"] + cmd
        subprocess.run(cmd, check=True)
    return bin_dir


def busybox_tar():
    """A busybox rootfs tarball, built once per run."""
    out = os.path.join(SCRATCH, "busybox.tar.gz")
    if not os.path.exists(out):
        if not os.access("/bin/busybox", os.X_OK):
            raise unittest.SkipTest("needs busybox-static (/bin/busybox)")
        subprocess.run([os.path.join(SRCDIR, "examples",
                                     "mkrootfs-busybox.sh"), out],
                       check=True, stdout=subprocess.DEVNULL)
    return out


class Store:
    """A private DSEC_ROOT and DSEC_RUN with busybox:1 pulled, and the
    environment for dsec-run serve.  The directories are 0711 all the way
    up from SCRATCH: a sandbox's root (an unprivileged host uid) must
    traverse them."""

    def __init__(self, store=None):
        self.dir = tempfile.mkdtemp(prefix="store.", dir=SCRATCH)
        os.chmod(self.dir, 0o711)
        self.root = os.path.join(self.dir, "root")
        self.run = os.path.join(self.dir, "run")
        os.mkdir(self.run, 0o711)
        self.bin = _bin_dir()
        self.program = os.path.join(self.bin, "dsec-run")
        self.env = {"DSEC_ROOT": self.root, "DSEC_RUN": self.run,
                    "DSEC_STORE": store, "DSEC_LOG_FORMAT": None,
                    "DSEC_DEBUG": None, "LC_ALL": "C",
                    "PATH": self.bin + os.pathsep + os.environ["PATH"]}
        self.seen = set()
        self.dsec("pull", "--name", "busybox:1", "tar:" + busybox_tar())

    def environ(self):
        out = dict(os.environ)
        for k, v in self.env.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def dsec(self, prog, *args, check=True):
        """Runs dsec-PROG ARGS in this store; its stdout's JSON lines."""
        p = subprocess.run([os.path.join(self.bin, "dsec-" + prog)] +
                           list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=self.environ())
        if check and p.returncode != 0:
            raise AssertionError("dsec-%s %s: exit %d: %s" % (
                prog, " ".join(args), p.returncode,
                p.stderr.decode(errors="replace")))
        return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]

    def serve(self, **kw):
        """A dsec.Serve on this store."""
        return dsec.Serve(self.program, env=self.env, **kw)

    def aio_serve(self, **kw):
        return dsec.aio.Serve(self.program, env=self.env, **kw)

    # ---- cleanup

    def track(self):
        """Remembers every sandbox of the store, listed or only on disk."""
        try:
            self.seen.update(d for d in os.listdir(
                os.path.join(self.root, "sandboxes")) if d.startswith("sb-"))
        except OSError:
            pass
        for rec in self.dsec("run", "ps", "--all", check=False):
            self.seen.add(rec["id"])

    def cgroups(self):
        out = []
        for sid in self.seen:
            out += glob.glob("/sys/fs/cgroup/*/dsec/" + sid)
        return out

    def pids(self):
        """dsec processes (supervisors, inits, dsec-run, qemu) whose
        environment names this store's DSEC_ROOT: this store's own."""
        want = ("DSEC_ROOT=" + self.root).encode()
        out = []
        for p in glob.glob("/proc/[0-9]*"):
            try:
                with open(p + "/comm") as f:
                    comm = f.read().strip()
                if comm not in _PROCS:
                    continue
                with open(p + "/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(p[6:]))
            except OSError:
                continue
        return out

    def clean(self):
        """Removes every sandbox of the store; returns what was left
        behind (and, then, cleans it up by hand: only this store's)."""
        problems = []
        self.track()
        if self.seen:
            p = subprocess.run([self.program, "rm", "--force"] +
                               sorted(self.seen), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=self.environ())
            if p.returncode != 0:
                problems.append("rm --force: %s" % p.stderr.decode(
                    errors="replace").strip())
        for _ in range(100):
            if not self.cgroups() and not self.pids():
                break
            time.sleep(0.1)
        left_cg, left_p = self.cgroups(), self.pids()
        if left_cg or left_p:
            problems.append("left behind: cgroups %s, processes %s" % (
                left_cg, left_p))
            self.last_resort()
        return problems

    def last_resort(self):
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for d in self.cgroups():
            try:
                with open(d + "/cgroup.procs") as f:
                    for pid in f.read().split():
                        os.kill(int(pid), 9)
            except OSError:
                pass
        time.sleep(0.5)
        for d in self.cgroups():
            try:
                os.rmdir(d)
            except OSError:
                pass

    def destroy(self):
        problems = self.clean()
        # the host's mounts of the layers the sandboxes used (dsec-reap's
        # to undo), before the directory holding them goes
        # (a bind mount of a directory onto itself: os.path.ismount cannot
        # tell, the mount table can)
        layers = os.path.join(self.run, "layers")
        with open("/proc/self/mounts") as f:
            mounted = any(line.split()[1] == layers for line in f)
        if mounted:
            subprocess.run(["umount", "-R", "-l", layers],
                           stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems


_STORES = []


class StoreTest(unittest.TestCase):
    """A test class with a store of its own (root needed): each test's
    sandboxes are removed after it, and anything left behind fails it."""

    store_kw = {}

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        cls.store = Store(**cls.store_kw)
        _STORES.append(cls.store)

    @classmethod
    def tearDownClass(cls):
        problems = cls.store.destroy()
        _STORES.remove(cls.store)
        if problems:
            raise AssertionError("; ".join(problems))

    def setUp(self):
        self.addCleanup(self._check_clean)

    def _check_clean(self):
        problems = self.store.clean()
        self.assertEqual(problems, [])

    @contextlib.contextmanager
    def newer_op(self, name):
        """Skips the test, with the reason, when dsec-run does not have
        the op (or exec mode) NAME yet: the contract's ops the SDK is
        built for and the lead implements in parallel."""
        try:
            yield
        except dsec.Unsupported as e:
            self.skipTest("op %s not in this dsec-run yet (%s)" % (name, e))

    def serve(self, **kw):
        """A Serve closed at the end of the test (before the cleanup)."""
        s = self.store.serve(**kw)
        self.addCleanup(_close_quietly, s)
        return s


def _close_quietly(s):
    try:
        s.close()
    except Exception:
        pass


def destroy_all():
    """For the watchdog: every store still there."""
    for s in list(_STORES):
        s.destroy()
