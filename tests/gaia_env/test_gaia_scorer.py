"""GAIA scorer: the official question_scorer rules, case by case, and the gaia/format rewards."""

from __future__ import annotations

import pytest

from aworld_core.rewards.builtin import format_reward
from aworld_core.rewards.extract import extract_tagged_answer
from aworld_gaia_env.reward import gaia_reward
from aworld_gaia_env.scorer import normalize_number_str, normalize_str, question_scorer, split_string


@pytest.mark.parametrize(
    ("answer", "truth", "expected"),
    [
        # numbers: $, % and , are removed from the answer before float comparison
        ("$1,000", "1000", True),
        ("1,000", "1000", True),
        ("1000.0", "1000", True),
        ("12%", "12", True),
        (" 12 ", "12", True),
        ("12 %", "12", True),
        ("12 km", "12", False),  # other units make it unparseable: wrong
        ("twelve", "12", False),
        ("0.5", "0.50", True),
        ("1e3", "1000", True),
        ("1001", "1000", False),
        # lists: split on , and ; (either), same length, element by element
        ("a, b, c", "a,b,c", True),
        ("a; b; c", "a;b;c", True),
        ("a; b, c", "a,b;c", True),  # separators are interchangeable
        ("a, b", "a,b,c", False),  # lengths differ
        ("a, b, c, d", "a,b,c", False),
        ("1, 2, 3", "1,2,3", True),
        ("$1, 2%, 3", "1,2,3", True),  # numeric elements compared as numbers
        ("1, 2, 4", "1,2,3", False),
        ("Apple, BANANA", "apple,banana", True),  # elements lower-cased, whitespace removed
        ("apple., banana", "apple,banana", False),  # punctuation kept inside lists (as upstream)
        ("New York, Paris", "new york, paris", True),
        # strings: whitespace, case and punctuation removed
        ("Paris", "paris", True),
        ("  P a r i s ", "Paris", True),
        ("Paris.", "Paris", True),
        ("St. Petersburg!", "st petersburg", True),
        ("Lyon", "Paris", False),
        ("right-handed", "Right Handed", True),
    ],
)
def test_question_scorer(answer: str, truth: str, expected: bool) -> None:
    assert question_scorer(answer, truth) is expected


def test_scorer_helpers_follow_upstream() -> None:
    assert normalize_number_str("$1,234.5%") == 1234.5
    assert normalize_number_str("n/a") == float("inf")
    assert split_string("a,b;c") == ["a", "b", "c"]
    assert split_string("a,,b") == ["a", "", "b"]
    assert normalize_str(" Hello, World! ") == "helloworld"
    assert normalize_str(" Hello, World! ", remove_punct=False) == "hello,world!"
    assert question_scorer(None, "None") is True  # upstream scores str(None)


def test_answer_tag_extraction() -> None:
    assert extract_tagged_answer("thinking... <answer> 42 </answer>") == "42"
    assert extract_tagged_answer("<ANSWER>x</ANSWER>") == "x"
    assert extract_tagged_answer("use <answer>X</answer> format. <answer>\nParis\n</answer>") == "Paris"
    assert extract_tagged_answer("no tag here: 42") is None
    assert extract_tagged_answer("<answer>unclosed") is None
    assert extract_tagged_answer(None) is None


@pytest.mark.parametrize(
    ("solution", "truth", "expected"),
    [
        ("I think <answer>$1,000</answer>", "1000", 1.0),
        ("<answer>12%</answer>", "12", 1.0),
        ("<answer>a; b</answer>", "a;b;c", 0.0),
        ("<answer>PARIS.</answer>", "Paris", 1.0),
        ("Paris", "Paris", 0.0),  # right text, missing tag: 0
        ("<answer></answer>", "Paris", 0.0),
    ],
)
def test_gaia_reward(solution: str, truth: str, expected: float) -> None:
    assert gaia_reward("gaia", solution, truth, {}) == expected


def test_gaia_reward_without_ground_truth_is_an_error() -> None:
    with pytest.raises(ValueError, match="ground truth"):
        gaia_reward("gaia", "<answer>x</answer>", None, {})


def test_format_reward() -> None:
    assert format_reward("gaia", "<answer>x</answer>", None, {}) == 0.1
    assert format_reward("gaia", "x", None, {}) == 0.0


async def test_the_gaia_reward_is_registered_by_aworld_gaia_env_and_scores_an_episode() -> None:
    from aworld_core.plugins import PluginManager
    from aworld_core.rewards.registry import RewardStats, resolve_reward, score_episode
    from aworld_core.schemas import Episode, EpisodeStatus, Sample

    manager = PluginManager()  # the installed entry points: aworld-gaia-env's plugin among them
    reward = resolve_reward("gaia", plugin_manager=manager)
    assert reward.func is gaia_reward and "aworld-gaia-env" in reward.source
    episode = Episode(task_id="t", agent_id="a", final_answer="<answer>Paris</answer>")
    episode.finish(EpisodeStatus.SUCCESS)
    sample = Sample(id="s", prompt=[{"role": "user", "content": "?"}], ground_truth="paris")
    await score_episode(episode, sample, ["gaia", "format"], plugin_manager=manager, stats=RewardStats(), notify=False)
    assert episode.rewards == {"gaia": 1.0, "format": 0.1}
