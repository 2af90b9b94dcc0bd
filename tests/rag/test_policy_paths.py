"""The access policy holds for where a path leads and for the folder a client asks for (operator
sweep 2026-12-05: HIGH-1 symlinks, HIGH-2 a hidden or deny-listed folder as `path`, L1 the
database through links of other names), and globs RE2 could not compile in one set (MED-1)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pathspec
import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from kvspill.cli import rag_cmd
from kvspill.errors import ForbiddenPathError, InvalidParameterError
from kvspill.rag import files
from kvspill.rag.access import AccessPolicy
from kvspill.rag.files import FileFilter, check_filter, compile_globs, iter_sources, walk_files
from kvspill.rag.service import RagService
from kvspill.rag.store import EmbeddingStore
from kvspill.rag.types import ChunkingConfig, SkippedFile
from kvspill.server.rag_app import create_rag_app

from .conftest import FakeEmbedder, write_repo

ENV = "OPENAI_API_KEY=sk-SECRETENVVALUE123\n"
KUBE = "users:\n- user:\n    token: SECRETKUBETOKEN\n"
# 64 include globs of 874 characters with 30 wildcards each: inside the request bounds, and more
# than one RE2 set of the default 8 MiB holds (operator sweep, repro 03: a 500)
HEAVY_GLOB = "**/" + "".join("*" + "ab" * 14 for _ in range(30))
HEAVY_INCLUDE = tuple(f"{HEAVY_GLOB}{i}" for i in range(64))
HEAVY_NAME = "".join("x" + "ab" * 14 for _ in range(30)) + "7"  # matches HEAVY_INCLUDE[7] only


def _service(root: Path, db: Path, **policy: object) -> RagService:
    access = AccessPolicy.create([root], db_path=db, **policy)
    return RagService(FakeEmbedder(), EmbeddingStore(db), access)


def _indexed(service: RagService) -> tuple[set[str], str]:
    db = service.store._db()
    paths = {row[0] for row in db.execute("SELECT path FROM files")}
    return paths, "\n".join(row[0] for row in db.execute("SELECT text FROM chunks"))


def _app() -> typer.Typer:
    app = typer.Typer()
    rag_cmd.register(app)
    return app


@pytest.fixture
def linked_repo(tmp_path: Path) -> Path:
    """A repo whose innocently named links lead to its .env, its .kube/config and a key."""
    repo = write_repo(
        tmp_path / "root" / "repo",
        {
            ".env": ENV,
            ".kube/config": KUBE,
            "deploy/tls.key": "KEYMATERIAL123\n",
            "src/a.py": "def f():\n    return 1\n",
            "b.py": "def g():\n    return 2\n",
        },
    )
    (repo / "src/config.py").symlink_to("../.env")
    (repo / "src/kube.yaml").symlink_to("../.kube/config")
    (repo / "src/tls.txt").symlink_to("../deploy/tls.key")
    (repo / "kubedir").symlink_to(".kube", target_is_directory=True)
    (repo / "src/via_dir.yaml").symlink_to("../kubedir/config")  # through a linked folder
    (repo / "src/alias.py").symlink_to("../b.py")  # a link to an indexable file stays indexed
    (tmp_path / "outside.py").write_text("outside = 1\n")
    (repo / "src/out.py").symlink_to(tmp_path / "outside.py")
    return repo


# HIGH-1: symlinks are judged by where they lead


@pytest.mark.parametrize("include_hidden", [False, True])
def test_links_to_hidden_or_denied_files_are_never_indexed(
    linked_repo: Path, tmp_path: Path, include_hidden: bool
) -> None:
    service = _service(tmp_path / "root", tmp_path / "rag.sqlite3", include_hidden=include_hidden)
    report = service.precache_repo("repo")
    paths, texts = _indexed(service)
    assert paths == {"src/a.py", "b.py", "src/alias.py"}
    assert "SECRET" not in texts and "KEYMATERIAL" not in texts
    reasons = {s.path: s.reason for s in report.skipped}
    for link in ("src/config.py", "src/kube.yaml", "src/tls.txt", "src/via_dir.yaml"):
        assert reasons[link] == "a symlink to a hidden or deny-listed path: left out"
    assert reasons["src/out.py"] == "a symlink that leads outside the indexed directory"  # as before
    # a request's include does not widen it either
    only_links = FileFilter(include=("src/*",))
    report = service.precache_repo("repo", only_links, allow_removal=True)
    assert _indexed(service)[0] == {"src/a.py", "src/alias.py"}
    assert all("SECRET" not in hit.text for hit in service.search("OPENAI_API_KEY token", top_k=10))


def test_walk_and_read_both_judge_links_by_their_target(linked_repo: Path, tmp_path: Path) -> None:
    access = AccessPolicy.create([tmp_path / "root"], db_path=tmp_path / "rag.sqlite3")
    skipped: list[SkippedFile] = []
    listed = set(walk_files(linked_repo, FileFilter(), access, skipped=skipped))
    assert listed == {"b.py", "src/a.py", "src/alias.py", "src/out.py"}
    # a file swapped for a link after the walk is checked again before it is opened
    read = list(iter_sources(linked_repo, ["src/config.py", "src/alias.py"], 1 << 20, access))
    assert isinstance(read[0], SkippedFile) and "deny-listed" in read[0].reason
    assert not isinstance(read[1], SkippedFile) and read[1].data.startswith(b"def g")


# L1: the database is known by what it is, not by its name


@pytest.mark.parametrize("db_place", ["cache/rag.sqlite3", "rag.sqlite3"])  # below the root, in it
def test_the_database_is_never_opened_through_links_or_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_place: str
) -> None:
    root = write_repo(tmp_path / "root", {"src/a.py": "a = 1\n", "other/c.py": "c = 1\n"})
    db = root / db_place
    db.parent.mkdir(exist_ok=True)
    service = _service(root, db)
    service.precache_repo(".")  # the database, its -wal and -shm exist now
    (root / "src/data.bin").symlink_to(db)
    (root / "src/wal.txt").symlink_to(Path(f"{db}-wal"))
    os.link(db, root / "src/hard.db")  # a hard link: another name, the same file
    (root / "other/.gitignore").symlink_to(db)  # read by the walk itself
    opened: list[Path] = []
    open_path = Path.open

    def spy(self: Path, *args: object, **kwargs: object) -> object:
        opened.append(self.resolve())
        return open_path(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", spy)
    skipped: list[SkippedFile] = []
    assert set(walk_files(root, FileFilter(), service.access, skipped=skipped)) == {"src/a.py"}
    assert [s.path for s in skipped] == ["other"] and "database" in skipped[0].reason
    report = service.precache_repo(".", allow_removal=True)
    assert set(opened) == {root / "src/a.py"}  # hashed again; nothing of the database's
    assert {s.path for s in report.skipped} == {"other"}
    sources = list(iter_sources(root, ["src/data.bin", "src/hard.db"], 1 << 30, service.access))
    assert all(isinstance(s, SkippedFile) and "database" in s.reason for s in sources)
    assert set(opened) == {root / "src/a.py"}


# HIGH-2: the folder a client asks for is held to the same rules


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = write_repo(
        tmp_path / "root",
        {
            "repo/.kube/config": KUBE,
            "repo/.ssh/config": "Host x\n  IdentityFile ~/.ssh/key\n",
            "repo/gcloud/creds.json": '{"token": "SECRETGCLOUD"}\n',
            "repo/.config/gh/hosts.yml": "oauth_token: SECRETGH\n",
            "repo/.config/tool.toml": "a = 1\n",
            "repo/.env": ENV,
            "repo/.git/config": "[remote]\n url = https://u:SECRETGIT@example.com\n",
            "repo/src/a.py": "a = 1\n",
            ".hiddenrepo/a.py": "hidden = 1\n",
        },
    )
    (root / "repo/innocent").symlink_to(".kube", target_is_directory=True)
    return root


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("repo/.kube", "repo/.kube is hidden"),
        ("repo/.ssh", "repo/.ssh is hidden"),
        (".hiddenrepo", ".hiddenrepo is hidden"),
        ("repo/gcloud", "repo/gcloud is on the deny-list"),
        ("repo/innocent", "repo/.kube is hidden"),  # a link to it, resolved first
        ("repo/.git", "inside .git"),
        ("repo/.env", "repo/.env is hidden"),  # a file: refused for the policy, not only as a file
        ("repo/.kube/config", "repo/.kube is hidden"),
    ],
)
def test_a_hidden_or_denied_folder_named_as_path_is_a_403(
    home: Path, tmp_path: Path, path: str, why: str
) -> None:
    service = _service(home, tmp_path / "rag.sqlite3")
    for given in (path, str(home / path)):
        with pytest.raises(ForbiddenPathError, match="is not indexed: ") as e:
            service.precache_repo(given)
        assert e.value.param == "path" and why in str(e.value)
        with pytest.raises(ForbiddenPathError):  # an async job is refused before it is queued
            service.index_work(given, FileFilter(), ChunkingConfig(), False)
    assert _indexed(service)[0] == set()


def test_with_hidden_files_allowed_the_deny_list_still_holds_for_the_folder_asked_for(
    home: Path, tmp_path: Path
) -> None:
    service = _service(home, tmp_path / "rag.sqlite3", include_hidden=True)
    for path in ("repo/.kube", "repo/.ssh", "repo/innocent", "repo/.config/gh", "repo/.git", "repo/.env"):
        with pytest.raises(ForbiddenPathError, match="deny-list|inside .git"):
            service.precache_repo(path)
    assert service.precache_repo(".hiddenrepo").num_files == 1
    # `.config/gh/` holds below any folder asked for, not only below .config's parent
    service.precache_repo("repo/.config")
    assert _indexed(service)[0] == {"a.py", "tool.toml"}
    _, texts = _indexed(service)
    assert "SECRET" not in texts


def test_the_http_route_answers_403_for_a_hidden_folder(home: Path, tmp_path: Path) -> None:
    service = _service(home, tmp_path / "rag.sqlite3")
    with TestClient(create_rag_app(service)) as client:
        for body in ({"path": str(home / "repo/.kube")}, {"path": "repo/.ssh", "async": True}):
            response = client.post("/precache/repo", json=body)
            assert response.status_code == 403, response.text
            error = response.json()["error"]
            assert error["param"] == "path" and "is hidden" in error["message"]
        assert client.post("/precache/repo", json={"path": "repo"}).status_code == 200
        hits = client.post("/search", json={"query": "kubernetes admin token", "top_k": 10}).json()
        assert "SECRET" not in str(hits) and {h["path"] for h in hits["results"]} == {"src/a.py"}


def test_the_cli_refuses_a_hidden_or_denied_folder_with_one_error_line(home: Path, tmp_path: Path) -> None:
    db = ["--rag-db", str(tmp_path / "rag.sqlite3")]
    for args in (
        [str(home / "repo/.ssh")],  # the folder is its own root
        [str(home / "repo/.kube"), "--rag-root", str(home)],
        [str(home / "repo/.kube"), "--rag-include-hidden"],
    ):
        result = CliRunner().invoke(_app(), ["rag", "index", *args, *db])
        assert result.exit_code == 2, result.output
        assert "error:" in result.output and "is not indexed" in result.output
        assert "Traceback" not in result.output


# MED-1: globs that one RE2 set of 8 MiB could not hold


def test_request_globs_inside_the_bounds_compile_and_match(tmp_path: Path) -> None:
    check_filter(FileFilter(include=HEAVY_INCLUDE))  # was re2's "failed to compile Set"
    spec = compile_globs(HEAVY_INCLUDE)
    assert spec.match_file(f"src/{HEAVY_NAME}") and not spec.match_file(f"src/{HEAVY_NAME[:-1]}x")
    root = write_repo(tmp_path / "root", {"src/a.py": "a = 1\n"})  # HEAVY_NAME is past NAME_MAX
    assert list(walk_files(root, FileFilter(include=HEAVY_INCLUDE))) == []
    assert list(walk_files(root, FileFilter(exclude=HEAVY_INCLUDE))) == ["src/a.py"]


def test_the_http_route_takes_heavy_globs_inside_the_bounds(tmp_path: Path) -> None:
    root = write_repo(tmp_path / "root", {"repo/a.py": "a = 1\n", "repo/b.txt": "b\n"})
    service = _service(root, tmp_path / "rag.sqlite3")
    with TestClient(create_rag_app(service)) as client:
        body = {"path": "repo", "include": [*HEAVY_INCLUDE, "*.py"], "exclude": list(HEAVY_INCLUDE)}
        response = client.post("/precache/repo", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["num_files"] == 1


@pytest.mark.parametrize("param", ["include", "exclude"])
def test_globs_the_matcher_cannot_compile_are_a_400_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, param: str
) -> None:
    monkeypatch.setattr(files, "RE2_MAX_MEM", 128 << 10, raising=False)  # too small for one such glob
    with pytest.raises(InvalidParameterError, match="too large for the matcher to compile") as e:
        check_filter(FileFilter(**{param: HEAVY_INCLUDE[:2]}))
    assert e.value.param == param and "fewer wildcards" in str(e.value)


@pytest.fixture
def big_gitignore(tmp_path: Path) -> Path:
    """A .gitignore of 5,000 plain lines (repro 04: re2's traceback from `kvspill rag index`)."""
    lines = [f"build/output/generated_module_{i}/artifact_{i}.bin" for i in range(5000)]
    return write_repo(
        tmp_path / "repo",
        {
            ".gitignore": "\n".join(lines) + "\n",
            "a.py": "def f():\n    pass\n",
            "build/output/generated_module_4999/artifact_4999.bin": "ignored\n",
            "build/output/generated_module_4999/artifact_5000.bin": "kept\n",
        },
    )


def test_a_gitignore_of_5000_lines_is_honoured(big_gitignore: Path) -> None:
    assert set(walk_files(big_gitignore, FileFilter())) == {
        ".gitignore",  # no policy here: hidden files are listed
        "a.py",
        "build/output/generated_module_4999/artifact_5000.bin",
    }


def test_the_cli_indexes_beside_a_gitignore_of_5000_lines(big_gitignore: Path, tmp_path: Path) -> None:
    fake = FakeEmbedder()
    fake.name = "all-MiniLM-L6-v2"  # the model the CLI's --embedding-model default names
    db = ["--rag-db", str(tmp_path / "rag.sqlite3")]
    with pytest.MonkeyPatch.context() as m:
        m.setattr("kvspill.rag.model.load_embedder", lambda *args: fake)
        result = CliRunner().invoke(_app(), ["rag", "index", str(big_gitignore), *db])
    assert result.exit_code == 0, result.output
    assert '"num_files": 2' in result.output and "Traceback" not in result.output


def test_a_gitignore_that_cannot_compile_skips_its_folder_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_repo(
        tmp_path / "root", {"a.py": "a = 1\n", "sub/.gitignore": HEAVY_GLOB + "\n", "sub/b.py": "b = 1\n"}
    )
    monkeypatch.setattr(files, "RE2_MAX_MEM", 128 << 10, raising=False)
    skipped: list[SkippedFile] = []
    assert list(walk_files(root, FileFilter(), skipped=skipped)) == ["a.py"]
    assert skipped[0].path == "sub" and ".gitignore cannot be matched" in skipped[0].reason


def _random_gitignore(rng: random.Random) -> list[str]:
    atoms = ["a", "b", "build", "keep", "x.log", "*.log", "*", "**", "out", "q.txt", "?.py", "[ab]*"]
    lines = []
    for _ in range(rng.randint(2, 25)):
        line = "/".join(rng.choice(atoms) for _ in range(rng.randint(1, 3)))
        line = ("!" if rng.random() < 0.3 else "") + ("/" if rng.random() < 0.15 else "") + line
        lines.append(line + ("/" if rng.random() < 0.2 else ""))
    return lines


def test_globs_split_over_several_sets_match_as_pathspec_does(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(2)
    names = ["a", "b", "build", "keep", "x.log", "out", "q.txt", "k.py", "src"]
    paths = {"/".join(rng.choice(names) for _ in range(rng.randint(1, 4))) for _ in range(150)}
    paths |= {p + "/" for p in paths}
    lines_sets = [
        ["*.log", "!keep.log", "build/", "!build/keep/", "docs/**/*.tmp", "/z.py", "out/", "!src/**/out/"],
        *(_random_gitignore(rng) for _ in range(40)),
    ]
    num_sets = []
    for lines in lines_sets:
        reference = pathspec.GitIgnoreSpec.from_lines(lines, backend="simple")  # pathspec's rules
        monkeypatch.setattr(files, "RE2_MAX_MEM", 16 << 10, raising=False)  # a few lines a set
        split = compile_globs(lines)
        monkeypatch.undo()
        whole = compile_globs(lines)
        num_sets.append(len(split._backend._sets))  # type: ignore[attr-defined]
        for path in paths:
            want = reference.match_file(path)
            assert split.match_file(path) == want and whole.match_file(path) == want, (lines, path)
    assert num_sets[0] > 1 and sum(n > 1 for n in num_sets) > len(num_sets) // 2
