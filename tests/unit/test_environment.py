"""The suite's commit in the provenance: the tree's git, unless the runner names the commit."""

from bench.results.environment import REPO, suite_git


def test_a_named_commit_wins_over_the_trees_git(monkeypatch):
    monkeypatch.delenv("BENCH_GIT_SHA", raising=False)
    own = suite_git()
    if (REPO / ".git").exists():  # a copy without .git (a GPU host) has no sha of its own
        assert own["sha"] and len(own["sha"]) == 40 and own["dirty"] in (True, False)
    else:
        assert own == {"sha": None, "dirty": None}
    monkeypatch.setenv("BENCH_GIT_SHA", "5dfe406")
    assert suite_git() == {"sha": "5dfe406", "dirty": None}
