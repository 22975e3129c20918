"""The git repository around a synced MemFS directory: commits that go through its hooks, and nothing more.

tiermem commits only the files it changes, under its own name, through the repository's hooks (never
bypassed), from a private index: the user's other changes, staged or not, stay as they were, and a
rejected commit leaves nothing behind (``HookRejected`` says which file and why). Its bookkeeping lives
inside the git directory, out of the repository.

Why this module is long: ``Repo`` is the one place that runs git, and a commit from a private index, through the
hooks, landed under the index lock, is a sequence of plumbing steps that stays correct only together.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import ValidationError
from ..domain.memfs_files import POLICY_FILE

AUTHOR = ("tiermem", "tiermem@localhost")
_HOOK_LINE = re.compile(r"^\s+(\S.*?\.md): (.+)$")
_GIT_TIMEOUT = 120
_HOOK_RUN: dict[str, bool] = {}  # git executable -> whether it has `git hook run`


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
        done = subprocess.run(
            [git, "-C", str(root), "rev-parse", "--absolute-git-dir", "--show-prefix"],
            capture_output=True,
            text=True,
            check=False,
            timeout=_GIT_TIMEOUT,
        )
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

    def busy(self, stale: float = 10.0) -> bool:
        """Someone (Letta Code's memory tool, a person) is in the middle of a git command here (a lock older than
        ``stale`` seconds is a leftover of a git that died: not waited for)."""
        try:
            return time.time() - (self.gitdir / "index.lock").stat().st_mtime < stale
        except OSError:
            return False

    def state_file(self) -> Path:
        """Where tiermem keeps its sync record for this directory: inside the git directory."""
        tag = "" if not self.prefix else "-" + hashlib.sha256(self.prefix.encode()).hexdigest()[:12]
        return self.gitdir / f"tiermem-sync{tag}.json"

    # -- reading ------------------------------------------------------------------

    def run(
        self,
        *args: str,
        check: bool = True,
        ident: bool = False,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        top: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """git in the synced directory (``top``: at the work tree's top); waits out another git command's index lock
        for a few seconds."""
        where = (
            self.root / "/".join(".." for _ in self.prefix.strip("/").split("/")) if top and self.prefix else self.root
        )
        cmd = [
            self.git,
            *(["-c", f"user.name={AUTHOR[0]}", "-c", f"user.email={AUTHOR[1]}"] if ident else []),
            "-C",
            str(where),
            *args,
        ]
        # git status refreshes the index under its lock when it can; Letta Code's memory tool, committing at that
        # moment, would fail on the lock. tiermem's reads take no optional lock.
        full = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", **(env or {})}
        for attempt in range(50):
            done = subprocess.run(
                cmd, capture_output=True, text=True, check=False, timeout=_GIT_TIMEOUT, env=full, input=stdin
            )
            locked = "index.lock" in done.stderr and "File exists" in done.stderr
            if done.returncode == 0 or not locked or attempt == 49:
                break
            time.sleep(0.1)
        if check and done.returncode != 0:
            raise GitError(
                f"`git {' '.join(args[:2])}` failed in {self.root}: {(done.stderr or done.stdout).strip()[-800:]}"
            )
        return done

    def head_text(self, rel: str) -> str | None:
        """The file as the last commit has it (None: not in the last commit, or no commit yet)."""
        return self.head_texts([rel])[rel]

    def head_texts(self, rels: Iterable[str]) -> dict[str, str | None]:
        """Each file as the last commit has it (None: not in the last commit, or no commit yet), every one read by a
        single ``git cat-file --batch`` (one process, however many files), byte for byte (CRLF kept)."""
        wanted = list(dict.fromkeys(rels))
        if not wanted:
            return {}
        names = "".join(f"HEAD:{self.prefix}{rel}\n" for rel in wanted).encode("utf-8")
        done = subprocess.run(
            [self.git, "-C", str(self.root), "cat-file", "--batch"],
            input=names,
            capture_output=True,
            check=False,
            timeout=_GIT_TIMEOUT,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
        if done.returncode != 0:
            raise GitError(
                f"`git cat-file --batch` failed in {self.root}: {done.stderr.decode('utf-8', 'replace').strip()[-800:]}"
            )
        out, at = done.stdout, 0
        texts: dict[str, str | None] = {}
        for rel in wanted:  # per name: "<oid> <type> <size>" and the object, or "<name> missing" (or "ambiguous")
            end = out.index(b"\n", at)
            line = out[at:end].decode("utf-8", "replace")
            at = end + 1
            if line in (f"HEAD:{self.prefix}{rel} missing", f"HEAD:{self.prefix}{rel} ambiguous"):
                texts[rel] = None
                continue
            _, kind, size = line.split(" ")
            texts[rel] = out[at : at + int(size)].decode("utf-8", "replace") if kind == "blob" else None
            at += int(size) + 1
        return texts

    def changed(self, rels: list[str]) -> list[str]:
        """Which of ``rels`` differ from the last commit (modified, added, deleted or untracked)."""
        if not rels:
            return []
        done = self.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *rels)
        out: set[str] = set()
        for entry in done.stdout.split("\0"):
            if len(entry) > 3 and entry[2] == " ":
                path = entry[3:]
                out.add(path[len(self.prefix) :] if path.startswith(self.prefix) else path)
        return [r for r in rels if r in out]

    def last_commit(self, rel: str, *, wait: float = 1.0) -> tuple[str, str] | None:
        """(subject, author name) of the last commit that changed ``rel``, when the file is as it left it (waiting up
        to ``wait`` seconds for a commit in progress, such as Letta Code's memory tool's)."""
        deadline = time.monotonic() + wait
        while self.changed([rel]):
            if not self.busy() or time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        done = self.run("log", "-1", "--format=%s%x00%an", "--", rel, check=False)
        subject, _, author = done.stdout.strip().partition("\0")
        return (subject, author) if done.returncode == 0 and subject else None

    # -- committing ------------------------------------------------------------------

    def commit(
        self, changes: dict[str, str | None], message: str, write: Callable[[], None] | None = None
    ) -> tuple[str, bool]:
        """Commit ``changes`` (relative path -> new text; None removes the file) with ``message``: the commit's id, and
        whether the repository's index was brought in step for ``changes`` (no ``settle`` needed for them).

        The commit is built in a private index from HEAD, so the working tree and the repository's index are not
        touched until it has landed (Letta Code's memory tool, which refuses to run while the repository has
        uncommitted changes, never sees tiermem's half-done work), and a rejected commit leaves nothing behind:
        ``HookRejected`` says which file and why. The repository's hooks run as ``git commit`` runs them
        (pre-commit, prepare-commit-msg and commit-msg on the commit's index and message, post-commit after), then
        the branch moves in one compare-and-swap, and not while another git command holds the index (Letta Code's
        own commit, which would fail if the branch moved under it). A commit another process made in the meantime
        is never undone: the commit is built again on top of it.

        The branch, the work tree (``write``, the caller's, writes the files) and the repository's index move
        together while tiermem holds the index's lock, as git itself does: no git command of Letta Code's starts in
        between, and its next commit starts from an index that has tiermem's files (never one that would take them
        back). Without that lock (a git without `git hook run`, or a lock a dead git left behind), ``write`` is not
        called: the caller writes the files afterwards and settles them with ``settle``.
        """
        self._refuse_a_stale_lock()
        fd, tmp = tempfile.mkstemp(prefix="tiermem-index-", dir=self.gitdir)
        os.close(fd)
        index = {"GIT_INDEX_FILE": tmp}
        try:
            for _ in range(20):
                base = self.run("rev-parse", "--verify", "-q", "HEAD", check=False).stdout.strip() or None
                Path(tmp).unlink(missing_ok=True)
                self.run("read-tree", *([base] if base else ["--empty"]), env=index)
                modes = self._modes(list(changes), index)
                for rel, text in changes.items():
                    if text is None:
                        self.run("update-index", "--force-remove", "--", rel, env=index)
                    else:
                        blob = self.run("hash-object", "-w", "--stdin", "--path", rel, stdin=text).stdout.strip()
                        entry = f"{modes.get(rel, '100644')},{blob},{self.prefix}{rel}"
                        self.run("update-index", "--add", "--cacheinfo", entry, env=index, top=True)
                if self._runs_hooks():
                    landed = self._land(base, index, message, [f"{self.prefix}{r}" for r in changes], write)
                else:
                    made = self._land_by_commit(base, index, message)
                    landed = None if made is None else (made, False)
                if landed is not None:
                    return landed
            raise GitError(f"{self.root}: other commits kept landing while tiermem tried to commit; try again.")
        finally:
            Path(tmp).unlink(missing_ok=True)

    def _runs_hooks(self) -> bool:
        """Whether this git has `git hook run` (2.36 and later)."""
        if self.git not in _HOOK_RUN:
            _HOOK_RUN[self.git] = (
                self.run("hook", "run", "--ignore-missing", "tiermem-none", check=False).returncode == 0
            )
        return _HOOK_RUN[self.git]

    def _hook(self, name: str, *args: str, env: dict[str, str]) -> None:
        done = self.run(
            "hook", "run", "--ignore-missing", name, *(["--", *args] if args else []), check=False, env=env, top=True
        )
        if done.returncode != 0:
            output = (done.stdout + "\n" + done.stderr).strip()
            raise HookRejected(output, self._problems(output))

    def _land(
        self, base: str | None, index: dict[str, str], message: str, paths: list[str], write: Callable[[], None] | None
    ) -> tuple[str, bool] | None:
        """Hooks, commit object, then the branch moved from ``base`` (None: HEAD moved meanwhile, build again)."""
        self._hook("pre-commit", env=index)
        fd, msgfile = tempfile.mkstemp(prefix="tiermem-msg-", dir=self.gitdir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(message + "\n")
            self._hook("prepare-commit-msg", msgfile, "message", env=index)
            self._hook("commit-msg", msgfile, env=index)
            tree = self.run("write-tree", env=index).stdout.strip()
            who = {
                "GIT_AUTHOR_NAME": AUTHOR[0],
                "GIT_AUTHOR_EMAIL": AUTHOR[1],
                "GIT_COMMITTER_NAME": AUTHOR[0],
                "GIT_COMMITTER_EMAIL": AUTHOR[1],
            }
            made = self.run("commit-tree", tree, *(["-p", base] if base else []), "-F", msgfile, env=who).stdout.strip()
            subject = Path(msgfile).read_text(encoding="utf-8").split("\n", 1)[0]
        finally:
            Path(msgfile).unlink(missing_ok=True)
        if write is None:
            self.wait_until_idle()
            in_step: bool | None = False if self._move(base, made, subject) else None
        else:
            in_step = self._land_locked(base, made, subject, paths, write)
        if in_step is None:
            return None
        self.run("hook", "run", "--ignore-missing", "post-commit", check=False, top=True)
        return made, in_step

    def _land_locked(
        self, base: str | None, made: str, subject: str, paths: list[str], write: Callable[[], None]
    ) -> bool | None:
        """Move the branch from ``base`` to ``made``, write the files (``write``) and bring the index in step for
        ``paths``, holding the index's lock as git does (the branch is locked and checked before, so only its move,
        the files and the index's rename happen under it): whether the index could be brought in step; None: the
        branch moved meanwhile (build again).

        Letta Code's memory tool commits in steps that take no lock throughout: ``git add``, then ``git commit``,
        whose hook runs with the index unlocked, and which fails if the branch moved since it began. So in a Letta
        Code repository the branch does not move while the index holds changes that are not in HEAD (a commit on
        its way: the index was written in the last 10 s), and not once the index changed since that was checked."""
        deadline = time.monotonic() + 20.0
        while True:
            before = self._index_stat()
            if (self.run("rev-parse", "--verify", "-q", "HEAD", check=False).stdout.strip() or None) != base:
                return None
            if (
                self.agent_repo
                and base is not None
                and before is not None
                and time.monotonic() < deadline
                and time.time() - before[1] / 1e9 < 10.0
                and self.run("diff-index", "--cached", "--quiet", base, "--", check=False, top=True).returncode
            ):
                time.sleep(0.01)  # staged: a memory-tool call is between its `git add` and its commit
                continue
            staged = self._index_after(made, paths)
            content = staged.read_bytes() if staged is not None else None
            if staged is not None:
                staged.unlink(missing_ok=True)
            if self._index_stat() != before:
                continue
            move = _RefMove(self, base, made, subject)  # the branch locked and checked now, moved in one step later
            lock: int | None = None
            try:
                if not move.prepare():
                    return None
                lock = self._lock_index()
                if lock is None:
                    self._refuse_a_stale_lock()
                    raise GitError(
                        f"{self.root}: another git command kept the repository's index locked for 10 s; try again."
                    )
                if self._index_stat() != before:
                    continue
                # from here to the index's rename: well under a millisecond, no process started
                if not move.commit():
                    return None
                write()
                if content is None:
                    return False
                os.write(lock, content)
                os.close(lock)
                lock = None
                os.replace(self.gitdir / "index.lock", self.gitdir / "index")
                return True
            finally:
                move.close()
                if lock is not None:
                    os.close(lock)
                    (self.gitdir / "index.lock").unlink(missing_ok=True)

    def _index_stat(self) -> tuple[int, int, int] | None:
        """The repository's index file's identity: git replaces the file whenever it changes it."""
        try:
            st = (self.gitdir / "index").stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _move(self, base: str | None, made: str, subject: str) -> bool:
        moved = self.run("update-ref", "-m", f"commit: {subject}", "HEAD", made, base or "0" * 40, check=False)
        return moved.returncode == 0

    def _refuse_a_stale_lock(self) -> None:
        lock = self.gitdir / "index.lock"
        try:
            age = time.time() - lock.stat().st_mtime
        except OSError:
            return
        if age >= 10.0:
            raise GitError(
                f"{lock} is {age:.0f} s old: a git command that stopped left it behind, and git (Letta "
                "Code's memory tool too) can change nothing in this repository while it is there. If no git "
                "command is running, remove it; nothing was committed."
            )

    def _lock_index(self, most: float = 10.0) -> int | None:
        """Take the repository's index lock (waiting at most ``most`` s for another git command to let it go); None:
        a lock a dead git left behind, or still held."""
        path = self.gitdir / "index.lock"
        deadline = time.monotonic() + most
        while True:
            try:
                return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                try:
                    stale = time.time() - path.stat().st_mtime >= 10.0
                except OSError:
                    continue  # let go just now
                if stale or time.monotonic() > deadline:
                    return None
                time.sleep(0.005)

    def _index_after(self, made: str, paths: list[str]) -> Path | None:
        """A copy of the repository's index with ``paths`` as commit ``made`` has them (the rest, whatever someone
        staged, as it was); None if git could not make it (the caller then settles them with ``settle``)."""
        fd, name = tempfile.mkstemp(prefix="tiermem-next-index-", dir=self.gitdir)
        os.close(fd)
        staged = Path(name)
        try:
            shutil.copyfile(self.gitdir / "index", staged)
        except FileNotFoundError:
            staged.unlink()
        done = self.run("reset", "-q", made, "--", *paths, check=False, env={"GIT_INDEX_FILE": str(staged)}, top=True)
        if done.returncode == 0 and staged.exists():
            return staged
        staged.unlink(missing_ok=True)
        return None

    def _land_by_commit(self, base: str | None, index: dict[str, str], message: str) -> str | None:
        """For a git without `git hook run`: ``git commit`` on the private index (it runs the hooks itself)."""
        done = self.run("commit", "-q", "-m", message, check=False, ident=True, env=index)
        if done.returncode != 0:
            output = (done.stdout + "\n" + done.stderr).strip()
            if "cannot lock ref" in output:
                return None  # another commit landed while this one was checked: build it again
            raise HookRejected(output, self._problems(output))
        head = self.run("rev-parse", "HEAD").stdout.strip()
        parent = self.run("rev-parse", "--verify", "-q", "HEAD^", check=False).stdout.strip() or None
        if parent == base:
            return head
        # built on a HEAD that moved before the commit read it: take it back (only if still on top), again
        if parent is None:
            self.run("update-ref", "-d", "HEAD", head, check=False)
        else:
            self.run("update-ref", "HEAD", parent, head, check=False)
        return None

    def wait_until_idle(self, most: float = 10.0) -> None:
        """Wait (at most ``most`` s) while another git command holds the repository's index."""
        deadline = time.monotonic() + most
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _modes(self, rels: list[str], env: dict[str, str]) -> dict[str, str]:
        listed = self.run("ls-files", "-s", "-z", "--", *rels, env=env).stdout
        out: dict[str, str] = {}
        for entry in listed.split("\0"):
            meta, _, path = entry.partition("\t")
            if path:
                out[path[len(self.prefix) :] if path.startswith(self.prefix) else path] = meta.split(" ")[0]
        return out

    def _problems(self, output: str) -> dict[str, list[str]]:
        problems: dict[str, list[str]] = {}
        for line in output.splitlines():
            m = _HOOK_LINE.match(line)
            if m:
                path = m.group(1)
                problems.setdefault(path[len(self.prefix) :] if path.startswith(self.prefix) else path, []).append(
                    m.group(2)
                )
        return problems

    def settle(self, rels: list[str]) -> None:
        """After a commit and the files written: the repository's index agrees with HEAD for ``rels``."""
        if rels:
            self.wait_until_idle()
            self.run("reset", "-q", "--", *rels, check=False)


class _RefMove:
    """``git update-ref --stdin`` as a transaction: ``prepare`` locks the branch and checks it is still at ``base``;
    ``commit`` moves it (no process started then); ``close`` without ``commit`` lets it go unmoved."""

    def __init__(self, repo: Repo, base: str | None, made: str, subject: str) -> None:
        self.update = f"update HEAD {made} {base or '0' * 40}\n"
        cmd = [repo.git, "-C", str(repo.root), "update-ref", "-m", f"commit: {subject}", "--stdin"]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )

    def _say(self, text: str, *answers: str) -> bool:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
            return all(self.proc.stdout.readline().strip() == a for a in answers)
        except OSError:
            return False  # git stopped (it says why on stderr): the branch was not where it was expected

    def prepare(self) -> bool:
        return self._say(f"start\n{self.update}prepare\n", "start: ok", "prepare: ok")

    def commit(self) -> bool:
        return self._say("commit\n", "commit: ok")

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()  # an open transaction ends unmoved (git aborts it at end of input)
        try:
            self.proc.wait(_GIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
