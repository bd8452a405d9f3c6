"""Sandboxed rank processes: what code under test can see, reach and use.

`enable(SandboxConfig(...))`, called once before the first `launch` of a process, makes the
forkserver (`harness.forkserver.use_wrapper`) — and so every rank forked from it — start
through a small wrapper script that enters `bwrap`:
- a PID namespace of its own (the ranks see the forkserver and each other, no host process),
  a network namespace with only loopback up (gloo still works), no shared IPC;
- an allow-listed file system, read-only: the system's programs and libraries (/usr, /etc),
  the interpreter and its packages, of this checkout only what ranks import (`RANK_CHECKOUT`:
  the harness and assignments/, plus the parts the caller names in `SandboxConfig.checkout`;
  nothing else: no tests, tools, hidden suites, solutions unless under test, or `.git`), the
  submission; a fresh /tmp and the
  session's work folder — no home, no other checkout, no /proc of other processes;
- a cleared environment, then `python -I` (no sitecustomize, .pth of the user site, PYTHON*).
As root, the forkserver keeps only the capabilities to change user, and each rank becomes a
user of its own (`RANK_UID_FIRST` and up) before any code under test runs: a rank cannot read or
write its peers' folders, signal them or read their memory. The launcher ends every launch's
processes together through a control group per launch (`harness.cgroups`: cgroup.kill or
freezer, with `pids.max` and the memory limit per launch) when the cgroup tree is writable.
Whatever cannot be set up is reported: `SandboxStatus.mode` is "full" or "degraded" with the
reasons, and callers that demand the full sandbox (the trusted workflow) treat degraded as an
error. Limits that need no privilege (file size, wall clock) are applied in every rank
regardless, by `harness.rankmain`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import cgroups, forkserver, tempdirs
from harness.impl import REPO_ROOT

DEGRADED_DISK = ("disk bounded per launch only in the launch folder (HOME, TMPDIR) and per "
                 "file (RLIMIT_FSIZE): a rank can write elsewhere its user can (host /tmp)")
UNPRIVILEGED_UID = 65534  # nobody: the stand-in that checks another user can read the checkout
# Rank r of a session runs as RANK_UID_FIRST + block * RANK_UIDS + r: users no host account
# has, a block per grading process so that sessions side by side never share one.
RANK_UID_FIRST = 200_000_000
RANK_UIDS = forkserver.RANK_UIDS
# What any Python needs from the host: programs, libraries, their configuration.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SAFE_ENV_KEYS = ("LANG", "LC_ALL", "TZ")
RANK_PATH = "/usr/local/bin:/usr/bin:/bin"
# Files and folders of CI runners that hold tokens, event payloads or step outputs.
RUNNER_ENV_PATHS = ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STEP_SUMMARY",
                    "GITHUB_STATE", "GITHUB_EVENT_PATH", "RUNNER_TEMP")


@dataclass(frozen=True)
class SandboxConfig:
    """What to hide and how much to allow. Paths are absolute; missing ones are ignored."""

    hide: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    # Parts of the checkout (relative paths) that rank code imports besides `RANK_CHECKOUT`:
    # the caller's own modules that rank functions use (the harness names none of them).
    checkout: tuple[str, ...] = ()
    memory_bytes: int = 8 * 2**30
    max_processes: int = 512

    def __post_init__(self) -> None:
        if self.memory_bytes < 2**28 or self.max_processes < 16:
            raise ValueError("a sandbox needs at least 256 MiB and 16 processes to run torch")


@dataclass(frozen=True)
class SandboxStatus:
    """`mode`: "off", "full" or "degraded"; `applied` and `missing` say what and why."""

    mode: str
    applied: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    workdir_base: str = ""

    @property
    def summary(self) -> str:
        if self.mode == "off":
            return "sandbox: off"
        if self.mode == "full":
            return "sandbox: full (" + "; ".join(self.applied) + ")"
        return "sandbox: degraded — " + "; ".join(self.missing)

    def to_plain(self) -> dict[str, object]:
        return {"mode": self.mode, "applied": list(self.applied), "missing": list(self.missing),
                "summary": self.summary}


_status: SandboxStatus | None = None


def status() -> SandboxStatus:
    return _status or SandboxStatus(mode="off")


def _runner_files() -> list[str]:
    """Files of CI runners that hold tokens, event payloads or step outputs."""
    return [os.environ[key] for key in RUNNER_ENV_PATHS if os.environ.get(key)]


# What ranks need of the checkout, and nothing else of it: the harness and the provided modules
# and stubs, plus what the caller lists in `SandboxConfig.checkout`. Everything else stays
# unbound: tests (which may hold correct implementations), tools, hidden suites, solutions/
# (unless it is the code under test, then it comes in as `SandboxConfig.readable`), .git, docs.
RANK_CHECKOUT = ("harness", "assignments")


def _required_paths(checkout: tuple[str, ...] = ()) -> list[str]:
    """What ranks need: what `RANK_CHECKOUT` and `checkout` list of the checkout, and the
    interpreter with its packages."""
    executable_dir = os.path.dirname(os.path.realpath(sys.executable))
    paths = [*(str(REPO_ROOT / part) for part in (*RANK_CHECKOUT, *checkout)), sys.prefix,
             sys.base_prefix, executable_dir]
    for path in (sys.prefix, sys.executable):  # a venv inside the checkout: its link too
        if _inside(path, [str(REPO_ROOT)]):
            top = REPO_ROOT / Path(path).relative_to(REPO_ROOT).parts[0]
            paths.append(str(top))
    return paths + [os.path.realpath(p) for p in paths if os.path.realpath(p) != p]


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _hide(path: str) -> list[str]:
    if os.path.isdir(path):
        return ["--tmpfs", path]
    if os.path.exists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


def _bind(path: str, *, writable: bool) -> list[str]:
    """Bind `path` onto itself; folders bwrap creates on the way are made 0755, not 0700.
    A symbolic link stays a link (to a target that must be bound too)."""
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    args: list[str] = []
    for ancestor in reversed(Path(path).parents[:-1]):
        args += ["--perms", "0755", "--dir", str(ancestor)]
    return [*args, "--bind" if writable else "--ro-bind", path, path]


def _bwrap_args(config: SandboxConfig, base: str) -> list[str]:
    """Nothing of the host but what is bound here: the system, the interpreter, the checkout
    and the submission (read-only), then the secrets inside those covered, then the work
    folder (writable). Links among them (a venv that points elsewhere) are bound as links."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp"]
    allowed = [p for p in (*SYSTEM_PATHS, *_required_paths(config.checkout), *config.readable)
               if os.path.lexists(p)]
    links = [p for p in allowed if os.path.islink(p)]
    for path in sorted(set(allowed) - set(links), key=lambda p: (p.count("/"), p)):
        if not _inside(path, [q for q in allowed if q != path and not os.path.islink(q)]):
            args += _bind(path, writable=False)
    for link in sorted(set(links)):
        if not _inside(link, [q for q in allowed if q != link and not os.path.islink(q)]):
            args += _bind(link, writable=False)
    readable = [p for p in allowed if not os.path.islink(p)]
    for path in sorted(set(config.hide) | set(_runner_files())):
        if _inside(path, readable):
            args += _hide(path)
    args += [*_bind(base, writable=True), "--chdir", base, "--clearenv"]
    env = {"PATH": RANK_PATH, "HOME": base, "TMPDIR": base,
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update({k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ})
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def _probe(command: list[str]) -> str | None:
    """Run Python under `command` and read a file of the checkout with it; None when that
    works, else the reason (the last line of its stderr)."""
    check = "import sys; open(sys.argv[1], 'rb').close()"
    try:
        proc = subprocess.run([*command, sys.executable, "-I", "-c", check,
                               str(REPO_ROOT / "harness" / "shim.py")],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return None


def _rank_uid_base() -> int:
    return RANK_UID_FIRST + (os.getpid() % 1_000_000) * RANK_UIDS




def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    tempdirs.release(folder)


def reset() -> set[int]:
    """Stop the forkserver (`harness.forkserver.stop`: the sandbox's namespace and everything in
    it end) and forget the sandbox, so that `enable` can set up a fresh one, e.g. for the next
    implementation of a session that grades several, each seeing only its own code. Returns
    the processes that had outlived their launches (found before the kill)."""
    global _status
    strays = forkserver.stop()
    if _status is not None and _status.workdir_base:
        _remove(os.path.dirname(_status.workdir_base))
    _status = None
    return strays


def enable(config: SandboxConfig) -> SandboxStatus:
    """Sandbox every rank this process starts from now on. Returns what could be applied.

    Raises RuntimeError when the forkserver already runs (it would stay unsandboxed).
    """
    global _status
    if _status is not None:
        return _status
    if forkserver.running():
        raise RuntimeError("sandbox.enable must run before the first launch in this process")
    tempdirs.sweep_once()  # the folders of sessions that were killed before their clean-up
    base = tempdirs.make("mlsys-sandbox-")
    os.chmod(base, 0o755)
    # The session's work folder: the launcher makes each launch's folder here; ranks write
    # only inside their launch's folder (their own folder, which is also their home and temp
    # folder, and the rendezvous), never here, and nothing here is shared among launches.
    work = os.path.join(base, "work")
    os.mkdir(work, 0o755)
    applied: list[str] = []
    missing: list[str] = []
    controller = cgroups.Controller.detect(os.getpid(), max_processes=config.max_processes,
                                           memory_bytes=config.memory_bytes)
    if controller is None or not controller.can_kill:
        missing.append("no control group per launch (needs root and a writable cgroup tree): "
                       "survivors are found through the forkserver, memory is capped only by "
                       "the machine")
    else:
        applied.append(f"a control group per launch, ended by {controller.can_kill}")
        applied += controller.limits_applied()
    setpriv = shutil.which("setpriv")
    other_user: list[str] = []  # a stand-in for the ranks' users: can they read the checkout?
    server: list[str] = []  # the forkserver: root, with only the capabilities to change user
    if os.geteuid() == 0 and setpriv:
        other_user = [setpriv, f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}",
                      "--clear-groups", "--inh-caps=-all", "--no-new-privs"]
        server = [setpriv, "--inh-caps=-all", "--bounding-set=-all,+setuid,+setgid",
                  "--no-new-privs"]
    plain_env = ["env", "-i", f"PATH={RANK_PATH}", f"HOME={work}", "OMP_NUM_THREADS=1"]
    sandbox_cmd: list[str] | None = None
    in_bwrap = False
    if shutil.which("bwrap") is None:
        missing.append("no bwrap (apt install bubblewrap): no PID or network namespace, the "
                       "whole file system visible")
    else:
        bwrap = [*_bwrap_args(config, work), "--"]
        problem = _probe(bwrap)
        if problem is None and server and (_probe([*bwrap, *other_user]) is not None
                                           or _probe([*bwrap, *server]) is not None):
            server = []
            missing.append("ranks run as root: another user cannot read the checkout "
                           "(make every folder above it o+rx to fix this)")
        if problem is None:
            sandbox_cmd, in_bwrap = [*bwrap, *server], True
            applied += ["PID namespace", "network namespace (loopback only)",
                        "allow-listed read-only file system (no home, no other checkout; "
                        "suites, solutions, .git covered)", "cleared environment"]
        else:
            missing.append(f"bwrap failed ({problem}): no PID or network namespace, the whole "
                           "file system visible")
    folder_owner = None
    if sandbox_cmd is None:  # degraded: at least another user and a clean environment
        # Without a mount namespace nothing unprivileged bounds the total a rank writes outside
        # the launch folder: HOME and TMPDIR point into it (capped), RLIMIT_FSIZE caps each
        # file, but any folder the rank's user can write (the host's /tmp, /dev/shm) is open.
        # Said in the report; the trusted workflow (`--sandbox strict`) refuses this mode.
        missing.append(DEGRADED_DISK)
        # Not a root forkserver here: without a network namespace a rank could reach its
        # socket and have it fork code as root. Forkserver and ranks run as nobody instead.
        server = []
        if other_user and _probe([*other_user, *plain_env]) is None:
            sandbox_cmd, folder_owner = [*other_user, *plain_env], UNPRIVILEGED_UID
            applied.append("ranks run as nobody (one user for all ranks)")
        else:
            sandbox_cmd = plain_env
            if os.geteuid() == 0:
                missing.append("ranks run as root (no setpriv, or nobody cannot run this "
                               "Python)")
        applied.append("cleared environment")
    uid_base = _rank_uid_base() if server else None
    if uid_base is not None:
        applied.append(f"a user of its own per rank (uid {uid_base} + rank: private folders, "
                       "no signals or memory across ranks)")
    elif os.geteuid() != 0:
        applied.append("folders 0700, ranks not dumpable (the grading process's user, not "
                       "root)" if in_bwrap else "folders 0700 (the grading process's user, "
                       "not root)")
    elif in_bwrap and not any(m.startswith("ranks run as root") for m in missing):
        missing.append("ranks run as root (no setpriv)")
    applied.append("python -I")
    mode = "full" if not missing else "degraded"
    status_ = SandboxStatus(mode=mode, applied=tuple(applied), missing=tuple(missing),
                            workdir_base=work)
    forkserver.use_wrapper(forkserver.Wrapper(
        command=tuple(sandbox_cmd), workdir_base=work,
        max_processes=config.max_processes,
        rank_uid_base=uid_base, folder_owner=folder_owner, memory_bytes=config.memory_bytes,
        private_memory=os.geteuid() == 0 or in_bwrap))
    _status = status_
    atexit.register(_remove, base)
    return status_
