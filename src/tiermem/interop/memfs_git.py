"""The git repository around a synced MemFS directory: commits that go through its hooks, and nothing more.

tiermem commits only the files it wrote (``git add`` and ``git commit -- PATHS``: the user's other
changes, staged or not, stay as they were), under its own name, and never bypasses a hook. When a
hook rejects a commit, the paths are unstaged again and ``HookRejected`` says which file and why
(the caller puts the files back as they were). Its bookkeeping lives inside the git directory, out
of the repository.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ValidationError

AUTHOR = ("tiermem", "tiermem@localhost")
POLICY_FILE = "letta-memory-layout-policy"  # Letta Code writes it beside its hooks
_HOOK_LINE = re.compile(r"^\s+(\S.*?\.md): (.+)$")
_GIT_TIMEOUT = 120


class GitError(ValidationError):
    """git failed (or is missing) in a synced directory."""


class HookRejected(GitError):
    """The commit was refused (a hook, most often): ``problems`` maps each file the hook named to its reasons."""

    def __init__(self, output: str, problems: dict[str, list[str]]) -> None:
        self.output = output
        self.problems = problems
        named = "; ".join(f"{p}: {', '.join(r)}" for p, r in problems.items())
        super().__init__(f"the commit was rejected ({named or output.strip()[-500:] or 'git gave no reason'})")


@dataclass(frozen=True)
class Repo:
    root: Path  # the synced directory
    gitdir: Path
    prefix: str  # the synced directory inside the work tree ("" at its top), with a trailing '/'
    git: str

    @classmethod
    def find(cls, root: Path) -> Repo | None:
        """The repository ``root`` is in, or None (no ``.git`` above it, or git is not installed)."""
        here = root.resolve()
        if not any((p / ".git").exists() for p in (here, *here.parents)):
            return None
        git = shutil.which("git")
        if git is None:
            raise GitError(f"{root} is in a git repository but git is not on PATH; install git.")
        done = subprocess.run([git, "-C", str(root), "rev-parse", "--absolute-git-dir", "--show-prefix"],
                              capture_output=True, text=True, check=False, timeout=_GIT_TIMEOUT)
        if done.returncode != 0:
            return None
        gitdir, prefix = (done.stdout.split("\n") + ["", ""])[:2]
        return cls(root, Path(gitdir), prefix, git)

    # -- what kind of repository ---------------------------------------------------

    @property
    def policy(self) -> str | None:
        """Letta Code's layout policy for this repository (``legacy-only``, ``root-marker``...), if it set one."""
        try:
            return (self.gitdir / POLICY_FILE).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    @property
    def agent_repo(self) -> bool:
        """A Letta Code memory repository: its hook validates every commit's memory files."""
        if self.policy is not None:
            return True
        try:
            return "Letta Code" in (self.gitdir / "hooks" / "pre-commit").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    def busy(self) -> bool:
        """Someone (Letta Code's memory tool, a person) is in the middle of a git command here."""
        return (self.gitdir / "index.lock").exists()

    def state_file(self) -> Path:
        """Where tiermem keeps its sync record for this directory: inside the git directory."""
        tag = "" if not self.prefix else "-" + hashlib.sha256(self.prefix.encode()).hexdigest()[:12]
        return self.gitdir / f"tiermem-sync{tag}.json"

    # -- reading ------------------------------------------------------------------

    def run(self, *args: str, check: bool = True, ident: bool = False) -> subprocess.CompletedProcess[str]:
        """git in the synced directory; waits out another git command's index lock for a few seconds."""
        cmd = [self.git, *(["-c", f"user.name={AUTHOR[0]}", "-c", f"user.email={AUTHOR[1]}"] if ident else []),
               "-C", str(self.root), *args]
        for attempt in range(50):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=_GIT_TIMEOUT)
            locked = "index.lock" in done.stderr and "File exists" in done.stderr
            if done.returncode == 0 or not locked or attempt == 49:
                break
            time.sleep(0.1)
        if check and done.returncode != 0:
            raise GitError(f"`git {' '.join(args[:2])}` failed in {self.root}: "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
        return done

    def head_text(self, rel: str) -> str | None:
        """The file as the last commit has it (None: not in the last commit, or no commit yet)."""
        done = self.run("show", f"HEAD:./{rel}", check=False)
        return done.stdout if done.returncode == 0 else None

    def changed(self, rels: list[str]) -> list[str]:
        """Which of ``rels`` differ from the last commit (modified, added, deleted or untracked)."""
        if not rels:
            return []
        done = self.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *rels)
        out: set[str] = set()
        for entry in done.stdout.split("\0"):
            if len(entry) > 3 and entry[2] == " ":
                path = entry[3:]
                out.add(path[len(self.prefix):] if path.startswith(self.prefix) else path)
        return [r for r in rels if r in out]

    def last_commit(self, rel: str) -> tuple[str, str] | None:
        """(subject, author name) of the last commit that changed ``rel``, when the file is as it left it."""
        if self.changed([rel]):
            return None
        done = self.run("log", "-1", "--format=%s%x00%an", "--", rel, check=False)
        subject, _, author = done.stdout.strip().partition("\0")
        return (subject, author) if done.returncode == 0 and subject else None

    # -- committing ------------------------------------------------------------------

    def commit(self, rels: list[str], message: str) -> str:
        """Commit exactly ``rels`` (written or removed) with ``message``; the new commit's id.

        Raises ``HookRejected`` (with nothing left staged) when a hook refuses it.
        """
        self.run("add", "-A", "--", *rels)
        done = self.run("commit", "-q", "-m", message, "--", *rels, check=False, ident=True)
        if done.returncode != 0:
            self.unstage(rels)
            output = (done.stdout + "\n" + done.stderr).strip()
            problems: dict[str, list[str]] = {}
            for line in output.splitlines():
                m = _HOOK_LINE.match(line)
                if m:
                    path = m.group(1)
                    problems.setdefault(path[len(self.prefix):] if path.startswith(self.prefix) else path,
                                        []).append(m.group(2))
            raise HookRejected(output, problems)
        return self.run("rev-parse", "HEAD").stdout.strip()

    def unstage(self, rels: list[str]) -> None:
        has_head = self.run("rev-parse", "--verify", "-q", "HEAD", check=False).returncode == 0
        if has_head:
            self.run("reset", "-q", "HEAD", "--", *rels, check=False)
        else:
            self.run("rm", "-q", "--cached", "-r", "--ignore-unmatch", "--", *rels, check=False)
