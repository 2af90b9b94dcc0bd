"""`kvspill precache` writes a prefix's blocks to --kv-persist-dir; `kvspill cache ls` shows them
(and invalid files), `kvspill cache clear` removes them. Tiny Llama on the CPU."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvspill.cli.main import _register_commands, app

ENGINE = ["--device", "cpu", "--dtype", "float32", "--block-size", "8", "--max-model-len", "512",
          "--num-kv-blocks", "8", "--num-cpu-kv-blocks", "64", "--hot-window-tokens", "16"]  # fmt: skip


def _run(*args: str):
    _register_commands()
    return CliRunner().invoke(app, list(args))


def test_precache_ls_and_clear(tiny_llama_dir, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("def a():\n    return 1\n" * 10)
    (repo / "b.md").write_text("# b\n" + "text " * 40)
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: x")  # hidden: left out
    persist = tmp_path / "persist"
    result = _run("precache", str(repo), "-m", str(tiny_llama_dir), "--kv-persist-dir", str(persist),
                  "--prompt-template", "Code:\n{files}", *ENGINE)  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["kept_tokens"] == summary["prompt_tokens"] // 8 * 8 > 0
    num_files = len(list(persist.glob("*.kvb")))
    assert num_files >= summary["kept_tokens"] // 8
    (persist / "0000000000000000.kvb").write_bytes(b"garbage")
    ls = _run("cache", "ls", "--kv-persist-dir", str(persist), "--json")
    assert ls.exit_code == 0, ls.output
    listing = json.loads(ls.stdout)
    assert listing["blocks"] == num_files and len(listing["fingerprints"]) == 1
    assert listing["invalid"][0]["why"].startswith("not a kvspill block file")
    cleared = _run("cache", "clear", "--kv-persist-dir", str(persist))
    assert cleared.exit_code == 0 and f"removed {num_files + 1} block files" in cleared.stdout
    assert not list(persist.glob("*.kvb"))


def test_precache_without_a_persist_dir_says_what_to_add(tiny_llama_dir, tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    result = _run("precache", str(tmp_path / "a.txt"), "-m", str(tiny_llama_dir), *ENGINE)
    assert result.exit_code == 2 and "--kv-persist-dir" in result.output
