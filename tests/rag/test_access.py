"""What the RAG service may read (issue 48, items 1-4 and 12): no secrets, no files outside the
roots, no database files, no other root's repos, no emptied index, no backtracking globs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvspill.cli.rag_cmd import RagOptions, build_rag_service
from kvspill.errors import ForbiddenPathError, InvalidParameterError, KvspillError
from kvspill.rag.access import AccessPolicy
from kvspill.rag.files import FileFilter, walk_files
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.rag.types import SkippedFile

from .conftest import FakeEmbedder, write_repo

OPENSSH_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
)
RSA_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
HOME = {
    ".ssh/id_ed25519": OPENSSH_KEY,
    ".ssh/config": "Host x\n",
    ".aws/credentials": "[default]\naws_secret_access_key = abc\n",
    ".env": "TOKEN=secret\n",
    ".bash_history": "ls\n",
    "proj/app.py": "def handler():\n    return 1\n",
    "proj/.env.production": "DB_PASSWORD=hunter2\n",
    "proj/deploy/server.pem": RSA_KEY,
    "proj/deploy/tls.key": "key\n",
    "proj/deploy/prod.env": "X=1\n",
    "proj/notes/backup.txt": "my old key:\n" + RSA_KEY,
    "proj/settings.py": "aws_secret_access_key = 'AKIA...'\n",
    "proj/gcloud/application_default_credentials.json": "{}\n",
    "proj/infra/terraform.tfstate": "{}\n",
}


def _service(root: Path, db: Path, **policy: object) -> RagService:
    store = EmbeddingStore(db)
    return RagService(FakeEmbedder(), store, AccessPolicy.create([root], db_path=db, **policy))  # type: ignore[arg-type]


def _indexed_texts(service: RagService) -> str:
    rows = service.store._db().execute("SELECT path, text FROM chunks").fetchall()
    return "\n".join(f"{path}: {text}" for path, text in rows)


def test_a_home_directory_gives_no_secret_away(tmp_path: Path) -> None:
    home = write_repo(tmp_path / "home", HOME)
    service = _service(home, tmp_path / "db" / "rag.sqlite3")
    report = service.precache_repo(".")
    texts = _indexed_texts(service)
    assert "PRIVATE KEY" not in texts and "aws_secret" not in texts and "hunter2" not in texts
    assert sorted({row[0] for row in service.store._db().execute("SELECT path FROM files")}) == [
        "proj/app.py"
    ]
    reasons = {s.path: s.reason for s in report.skipped}
    assert "private key" in reasons["proj/notes/backup.txt"]
    assert "cloud secret key" in reasons["proj/settings.py"]
    assert service.search("BEGIN OPENSSH PRIVATE KEY", top_k=10)[0].path == "proj/app.py"


def test_hidden_files_need_a_flag_and_the_deny_list_holds_even_then(tmp_path: Path) -> None:
    home = write_repo(
        tmp_path / "home", {**HOME, ".config/tool.toml": "a = 1\n", "proj/.github/ci.yml": "on: push\n"}
    )
    service = _service(home, tmp_path / "rag.sqlite3", include_hidden=True, extra_deny=("*.yml",))
    service.precache_repo(".")
    paths = {row[0] for row in service.store._db().execute("SELECT path FROM files")}
    assert paths == {"proj/app.py", ".config/tool.toml"}
    # a request's filters narrow the policy, never widen it
    include_all = FileFilter(include=("*",), respect_gitignore=False)
    assert set(walk_files(home, include_all, service.access)) == {
        "proj/app.py", ".config/tool.toml", "proj/notes/backup.txt", "proj/settings.py"
    }  # fmt: skip


def test_the_database_files_and_directory_are_never_walked(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {"a.py": "a = 1\n", "cache/other.txt": "x\n"})
    in_root = _service(root, root / "rag.sqlite3")
    in_root.precache_repo(".")  # the database, its -wal and -shm files sit in the indexed root
    assert {p.name for p in root.iterdir()} >= {"rag.sqlite3", "rag.sqlite3-wal"}
    assert set(walk_files(root, FileFilter(), in_root.access)) == {"a.py", "cache/other.txt"}
    other = write_repo(tmp_path / "other", {"a.py": "a = 1\n", "cache/other.txt": "x\n"})
    below = _service(other, other / "cache" / "rag.sqlite3")
    below.precache_repo(".")
    assert set(walk_files(other, FileFilter(), below.access)) == {"a.py"}  # the database's folder


def test_search_and_stats_see_only_their_roots(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite3"
    a = write_repo(tmp_path / "a", {"proj/x.py": "alpha_function = 1\n"})
    b = write_repo(tmp_path / "b", {"proj/y.py": "beta_function = 2\n"})
    service_a, service_b = _service(a, db), _service(b, db)
    service_a.precache_repo("proj")
    assert service_b.search("alpha_function") == []
    assert service_b.stats()["repos"] == 0 and service_b.stats()["chunks"] == 0
    service_b.precache_repo("proj")
    hits = service_b.search("alpha_function beta_function", top_k=5)
    assert [(h.repo, h.path) for h in hits] == [("proj", "y.py")]
    stats = service_a.stats()
    assert stats["repos"] == 1 and stats["files"] == 1 and "db_path" not in stats
    assert str(tmp_path) not in repr(stats) and str(tmp_path) not in repr(hits)
    with pytest.raises(ForbiddenPathError):
        service_b.search("x", repo=str(a / "proj"))


def test_a_reindex_that_empties_an_index_needs_allow_removal(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {f"proj/f{i}.py": f"value_{i} = {i}\n" for i in range(4)})
    service = _service(root, tmp_path / "rag.sqlite3")
    service.precache_repo("proj")
    nothing = FileFilter(include=("*.nomatch",))
    with pytest.raises(InvalidParameterError, match="drop 4 indexed files of proj and add 0") as e:
        service.precache_repo("proj", nothing)
    assert e.value.param == "allow_removal" and service.stats()["files"] == 4
    (root / "proj/f0.py").unlink()
    (root / "proj/new.py").write_text("fresh = 1\n")
    assert service.precache_repo("proj").num_files_removed == 1  # drops 1, adds 1: no flag needed
    assert service.precache_repo("proj", nothing, allow_removal=True).num_files_removed == 4


def test_globs_match_in_linear_time(tmp_path: Path) -> None:
    attack = "*?" * 12 + "*#"  # Python's re: minutes with the GIL held (issue 48, item 4)
    root = write_repo(
        tmp_path / "root", {"a" * 120 + ".py": "x\n", "pkg/.gitignore": attack + "\n", "pkg/b.py": "y\n"}
    )
    start = time.monotonic()
    found = list(walk_files(root, FileFilter(include=(attack[:-1] + "*", "*.py"), exclude=(attack,))))
    assert time.monotonic() - start < 1.0
    assert sorted(found) == ["a" * 120 + ".py", "pkg/b.py"]
    with pytest.raises(InvalidParameterError, match="wildcards; at most 32") as e:
        list(walk_files(root, FileFilter(include=("*?" * 20,))))
    assert e.value.param == "include"
    with pytest.raises(InvalidParameterError, match="at most 256 globs"):
        list(walk_files(root, FileFilter(exclude=tuple(f"x{i}" for i in range(257)))))


def test_the_walk_stops_at_its_deadline(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {"a/b.py": "x\n"})
    with pytest.raises(InvalidParameterError, match="ran past its deadline"):
        list(walk_files(root, FileFilter(), deadline=time.monotonic() - 1))


def test_symlink_loops_are_skipped_and_the_rest_indexed(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {"proj/ok.py": "ok = 1\n"})
    (root / "proj/loop_a").symlink_to(root / "proj/loop_b")
    (root / "proj/loop_b").symlink_to(root / "proj/loop_a")
    (root / "proj/self_dir").symlink_to(root / "proj", target_is_directory=True)
    skipped: list[SkippedFile] = []
    assert list(walk_files(root / "proj", FileFilter(), skipped=skipped)) == ["ok.py"]
    assert {s.path for s in skipped} == {"loop_a", "loop_b"}
    service = _service(root, tmp_path / "rag.sqlite3")
    (root / "loop").symlink_to(root / "loop")
    assert service.precache_repo("proj").num_files == 1
    with pytest.raises(InvalidParameterError, match="cannot be resolved"):
        service.precache_repo("loop")
    with pytest.raises(InvalidParameterError, match="cannot be resolved"):  # found by the fuzz run
        service.search("x", repo="a\x00b")


def test_a_server_needs_its_root_and_does_not_expand_home(tmp_path: Path) -> None:
    with pytest.raises(KvspillError, match="the RAG service needs --rag-root"):
        build_rag_service(RagOptions(True, rag_db=str(tmp_path / "rag.sqlite3")))
    root = write_repo(tmp_path / "root", {"a.py": "a = 1\n"})
    with pytest.raises(InvalidParameterError, match="is missing"):
        _service(root, tmp_path / "rag.sqlite3").precache_repo("~")
