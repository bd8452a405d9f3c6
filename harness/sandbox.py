"""Sandboxed rank processes: what code under test can see, reach and use.

`enable(SandboxConfig(...))`, called once before the first `launch` of a process, makes the
forkserver (`harness.forkserver.use_wrapper`) — and so every rank forked from it — start
through a small wrapper script that:
- joins a memory- and pids-limited cgroup (v1 or v2) when the cgroup tree is writable;
- drops to an unprivileged user (`nobody`) with `setpriv` when the grading process runs as root;
- enters `bwrap`: a new network namespace with only loopback up (gloo still works), the whole
  filesystem read-only, hidden paths covered by empty tmpfs (or /dev/null for files), a fresh
  /tmp and home, and a cleared environment;
- runs `python -I` (no sitecustomize, .pth from the user site, or PYTHON* variables).
Whatever cannot be set up is reported: `SandboxStatus.mode` is "full" or "degraded" with the
reasons, and callers that demand the full sandbox (the trusted workflow) treat degraded as an
error. Limits that need no privilege (file size, wall clock) are applied in every rank
regardless, by `harness.rankmain`; ranks that run as a user of their own also cap that user's
processes (`SandboxConfig.max_processes`, which reaches them in their job).
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import forkserver
from harness.impl import REPO_ROOT

UNPRIVILEGED_UID = 65534  # nobody
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


def _default_hidden() -> list[str]:
    paths = [os.path.expanduser("~"), "/root", "/home"]
    for key in RUNNER_ENV_PATHS:
        value = os.environ.get(key)
        if value:
            paths.append(value)
    return paths


def _cgroup_setup(name: str, config: SandboxConfig) -> tuple[list[str], list[str], list[str]]:
    """Create limited cgroups; return (cgroup.procs files to join, applied, missing)."""
    root = Path("/sys/fs/cgroup")
    joins: list[str] = []
    applied: list[str] = []
    try:
        if (root / "cgroup.controllers").exists():  # cgroup v2, unified
            controllers = (root / "cgroup.controllers").read_text().split()
            group = root / name
            group.mkdir(exist_ok=True)
            if "memory" in controllers:
                (group / "memory.max").write_text(str(config.memory_bytes))
                (group / "memory.swap.max").write_text("0") \
                    if (group / "memory.swap.max").exists() else None
                applied.append(f"memory ≤ {config.memory_bytes / 2**30:g} GiB (cgroup v2)")
            if "pids" in controllers:
                (group / "pids.max").write_text(str(config.max_processes))
                applied.append(f"processes ≤ {config.max_processes} (cgroup v2)")
            joins.append(str(group / "cgroup.procs"))
        else:  # cgroup v1: one hierarchy per controller
            memory, pids = root / "memory" / name, root / "pids" / name
            if (root / "memory").is_dir():
                memory.mkdir(exist_ok=True)
                (memory / "memory.limit_in_bytes").write_text(str(config.memory_bytes))
                joins.append(str(memory / "cgroup.procs"))
                applied.append(f"memory ≤ {config.memory_bytes / 2**30:g} GiB (cgroup v1)")
            if (root / "pids").is_dir():
                pids.mkdir(exist_ok=True)
                (pids / "pids.max").write_text(str(config.max_processes))
                joins.append(str(pids / "cgroup.procs"))
                applied.append(f"processes ≤ {config.max_processes} (cgroup v1)")
    except OSError as exc:
        return [], [], [f"no cgroup limits ({exc.strerror or exc}: memory is capped only by "
                        "the machine)"]
    missing = [] if joins else ["no cgroup limits (no writable cgroup tree)"]
    return joins, applied, missing


def _required_paths() -> list[str]:
    """What ranks need even inside a hidden folder: the course checkout and the interpreter."""
    executable_dir = os.path.dirname(os.path.realpath(sys.executable))
    return [str(REPO_ROOT), sys.prefix, sys.base_prefix, executable_dir]


def _hide(path: str) -> list[str]:
    if os.path.isdir(path):
        return ["--tmpfs", path]
    if os.path.exists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


def _bind(path: str, *, writable: bool) -> list[str]:
    """Bind `path` onto itself; folders bwrap creates on the way are made 0755, not 0700."""
    args: list[str] = []
    for ancestor in reversed(Path(path).parents[:-1]):
        args += ["--perms", "0755", "--dir", str(ancestor)]
    return [*args, "--bind" if writable else "--ro-bind", path, path]


def _bwrap_args(config: SandboxConfig, base: str) -> list[str]:
    """Order matters: hide broad folders, re-expose what ranks need, then hide the secrets."""
    args = ["bwrap", "--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in sorted(set(_default_hidden())):
        args += _hide(path)
    for path in [*_required_paths(), *config.readable]:
        if os.path.exists(path):
            args += _bind(path, writable=False)
    for path in sorted(set(config.hide)):
        args += _hide(path)
    args += [*_bind(base, writable=True), "--chdir", base, "--clearenv"]
    env = {"PATH": RANK_PATH, "HOME": os.path.join(base, "home"), "TMPDIR": base,
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


def enable(config: SandboxConfig) -> SandboxStatus:
    """Sandbox every rank this process starts from now on. Returns what could be applied.

    Raises RuntimeError when the forkserver already runs (it would stay unsandboxed).
    """
    global _status
    if _status is not None:
        return _status
    if forkserver.running():
        raise RuntimeError("sandbox.enable must run before the first launch in this process")
    base = tempfile.mkdtemp(prefix="mlsys-sandbox-")
    os.chmod(base, 0o755)
    work = os.path.join(base, "work")
    os.makedirs(os.path.join(work, "home"))
    os.chmod(work, 0o1777)
    os.chmod(os.path.join(work, "home"), 0o1777)
    applied: list[str] = []
    missing: list[str] = []
    joins, cg_applied, cg_missing = _cgroup_setup(f"mlsys-{os.getpid()}", config)
    applied += cg_applied
    missing += cg_missing
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:  # dropped inside bwrap, after the mounts
        prefix = [setpriv, f"--reuid={UNPRIVILEGED_UID}",
                  f"--regid={UNPRIVILEGED_UID}", "--clear-groups", "--inh-caps=-all",
                  "--no-new-privs"]
    plain_env = ["env", "-i", f"PATH={RANK_PATH}", f"HOME={work}/home", "OMP_NUM_THREADS=1"]
    sandbox_cmd: list[str] | None = None
    if shutil.which("bwrap") is None:
        missing.append("no bwrap (apt install bubblewrap): no network namespace, "
                       "hidden paths stay visible")
    else:
        candidate = [*_bwrap_args(config, work), "--", *prefix]
        problem = _probe(candidate)
        if problem is not None and prefix and _probe(candidate[:-len(prefix)]) is None:
            # nobody cannot read the checkout (e.g. it sits in a 0700 folder): keep the rest.
            candidate, prefix = candidate[:-len(prefix)], []
            problem = None
            missing.append("ranks run as root: the unprivileged user cannot read the checkout "
                           "(make every folder above it o+rx to fix this)")
        if problem is None:
            sandbox_cmd = candidate
            applied += ["network namespace (loopback only)", "read-only filesystem",
                        "hidden: suites, solutions, home, runner files", "cleared environment"]
        else:
            missing.append(f"bwrap failed ({problem}): no network namespace, hidden paths "
                           "stay visible")
    if sandbox_cmd is None:  # degraded: at least another user and a clean environment
        sandbox_cmd = [*prefix, *plain_env] if prefix and _probe([*prefix, *plain_env]) is None \
            else plain_env
        applied.append("cleared environment")
    own_user = bool(prefix) and prefix[0] in sandbox_cmd
    if os.geteuid() != 0:
        applied.append("same user as the grading process (not root)")
    elif own_user:
        applied.append("separate unprivileged user (nobody)")
    elif not any(m.startswith("ranks run as root") for m in missing):
        missing.append("ranks run as root (no setpriv, or nobody cannot run this Python)")
    applied.append("python -I")
    mode = "full" if not missing else "degraded"
    status_ = SandboxStatus(mode=mode, applied=tuple(applied), missing=tuple(missing),
                            workdir_base=work)
    joins_lines = [f"echo $$ > {shlex.quote(j)} 2>/dev/null || true" for j in joins]
    forkserver.use_wrapper(forkserver.Wrapper(
        command=tuple(sandbox_cmd), setup_lines=tuple(joins_lines), workdir_base=work,
        max_processes=config.max_processes if own_user else None))
    _status = status_
    atexit.register(_cleanup, base, joins)
    return status_


def _cleanup(base: str, cgroup_procs: list[str]) -> None:
    """Best effort at exit: the work folder, and the cgroups once their processes are gone."""
    shutil.rmtree(base, ignore_errors=True)
    for procs in cgroup_procs:
        try:
            os.rmdir(os.path.dirname(procs))
        except OSError:
            pass
