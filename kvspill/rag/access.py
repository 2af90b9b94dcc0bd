"""What the RAG service may read: its roots, hidden files, the secrets deny-list, the database's
own files.

Invariants:
- Every directory the service indexes resolves inside one of `roots`; anything else is a
  `ForbiddenPathError` (HTTP 403). There is no default root: a server is given its roots.
- `DEFAULT_DENY` (gitignore syntax) always applies; a user adds patterns (`--rag-deny`), never
  removes one. A file whose bytes hold a private-key block or a cloud secret key is left out by
  content, whatever its name, and the report says so.
- Hidden files and directories (a name starting with '.') are left out unless `include_hidden`.
- The database's own files are never opened, and its directory is never walked below a root:
  closing any descriptor of a SQLite file drops the process's POSIX locks on it, so reading the
  live database corrupts it (issue 48, item 9).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvspill.errors import ForbiddenPathError

# Files that hold credentials in the wild (gitleaks' and GitHub secret scanning's usual suspects).
# Matched against each path below the indexed directory, as a .gitignore line would be.
DEFAULT_DENY: tuple[str, ...] = (
    # SSH and PGP keys, keyrings and their folders
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.ppk", ".ssh/", ".gnupg/", "*.gpg", "*.pgp",
    "*.asc", "secring.*", "pubring.*", "authorized_keys", "known_hosts",
    # environment files
    ".env", ".env.*", "*.env", ".envrc",
    # credential and token files
    "credentials", "credentials.*", "*.credentials", ".git-credentials", ".netrc", "_netrc", ".npmrc",
    ".pypirc", ".dockercfg", ".pgpass", ".my.cnf", ".htpasswd", "*.token", "token.json", "tokens.json",
    ".vault-token", "secrets.json", "secrets.yaml", "secrets.yml", "secrets.toml", ".secrets",
    "*.secret", "client_secret*.json", "service-account*.json", "*.tfstate", "*.tfstate.backup",
    "*.kdbx", "*_history", ".lesshst",
    # private keys and certificate stores
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.p8",
    # cloud and cluster configuration folders
    ".aws/", ".azure/", "gcloud/", ".kube/", ".docker/", ".terraform.d/", ".oci/", ".config/gh/",
)  # fmt: skip

DB_SUFFIXES = ("", "-wal", "-shm", "-journal", ".lock")  # SQLite's files beside the database, our lock

# A secret in a file of any name: PEM private keys (RSA, EC, OpenSSH, PKCS#8, encrypted), PGP
# private key blocks, AWS secret access keys.
_SECRET_CONTENT = re.compile(
    rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|aws_secret_access_key\s*[=:]", re.IGNORECASE
)


def secret_reason(data: bytes) -> str | None:
    """Why `data` must not be indexed (it holds a secret), or None."""
    match = _SECRET_CONTENT.search(data)
    if match is None:
        return None
    what = "a cloud secret key" if match.group(0).lower().startswith(b"aws") else "a private key block"
    return f"holds {what}: left out of the index"


def is_hidden(name: str) -> bool:
    return name.startswith(".")


@dataclass(frozen=True)
class AccessPolicy:
    """The server's (or the CLI's) reading rules; per-request filters narrow them, never widen."""

    roots: tuple[Path, ...]  # resolved directories: every indexed directory lies under one
    include_hidden: bool = False
    extra_deny: tuple[str, ...] = ()  # --rag-deny: gitignore-style lines added to DEFAULT_DENY
    db_dir: Path | None = None  # the database's directory, resolved
    db_files: tuple[Path, ...] = ()  # the database, its WAL, shared-memory, journal and lock files

    @classmethod
    def create(
        cls,
        roots: Sequence[Path],
        include_hidden: bool = False,
        extra_deny: Sequence[str] = (),
        db_path: Path | None = None,
    ) -> AccessPolicy:
        if not roots:
            raise ValueError("an AccessPolicy needs at least one root")
        db = db_path.expanduser().resolve() if db_path is not None else None
        return cls(
            tuple(Path(r).expanduser().resolve() for r in roots),
            include_hidden,
            tuple(extra_deny),
            db.parent if db is not None else None,
            tuple(Path(f"{db}{s}") for s in DB_SUFFIXES) if db is not None else (),
        )

    @property
    def deny(self) -> tuple[str, ...]:
        return (*DEFAULT_DENY, *self.extra_deny)

    def root_of(self, path: Path) -> Path | None:
        """The root `path` (resolved) lies under, or None."""
        return next((r for r in self.roots if path == r or path.is_relative_to(r)), None)

    def check_inside(self, resolved: Path, given: str, param: str) -> Path:
        """The root holding `resolved`; a ForbiddenPathError (403) naming `given` otherwise."""
        root = self.root_of(resolved)
        if root is None:
            allowed = ", ".join(str(r) for r in self.roots)
            raise ForbiddenPathError(
                param,
                f"{given} is outside the directories this server may index ({allowed}): give a directory "
                "under one of them, or restart the server with another --rag-root",
            )
        return root

    @property
    def shows_absolute_paths(self) -> bool:
        """The CLI's policy (root "/"): its user owns the machine, paths show whole."""
        return any(r == Path(r.anchor) for r in self.roots)

    def display(self, repo: str) -> str:
        """`repo` (absolute) relative to its root, as clients see it ("." for the root itself)."""
        path = Path(repo)
        root = self.root_of(path)
        if root is None or self.shows_absolute_paths:
            return repo
        rel = path.relative_to(root).as_posix()
        return "." if rel in ("", ".") else rel

    def may_be_private(self, name: str) -> bool:
        """A cheap first test by name, before `is_private` resolves the path."""
        return any(name == p.name for p in self.db_files) or (
            self.db_dir is not None and name == self.db_dir.name
        )

    def is_private(self, path: Path, walked_root: Path) -> bool:
        """Whether the walk must not touch `path` (resolved): the database's files anywhere, its
        directory when it lies below the walked root (it may be the root itself: then only its
        files are left out)."""
        return path in self.db_files or (path == self.db_dir and path != walked_root)
