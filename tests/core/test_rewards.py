"""Rewards: GSM8K extraction, name resolution, and score_episode's handling of every outcome."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from aworld_core.config import RewardSection
from aworld_core.errors import UsageError
from aworld_core.hookspecs import hookimpl
from aworld_core.plugins import PluginManager
from aworld_core.rewards.builtin import gsm8k_reward
from aworld_core.rewards.extract import extract_gsm8k_answer
from aworld_core.rewards.registry import (
    RewardStats,
    compute_named_reward,
    resolve_reward,
    score_episode,
    solution_text,
)
from aworld_core.schemas import Episode, EpisodeStatus, ExpData, ExpMeta, LLMCall, Sample, TrajectoryStep
from aworld_core.specs import RewardSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        ("#### $18.00", "18"),
        ("####   -3", "-3"),
        ("#### 5.50 dollars", "5.5"),
        ("so 3 + 4 = 7 and the total is 1,000.", "1000"),
        ("The answer is 42.", "42"),
        ("Costs $12.0 each", "12"),
        ("The change is -7", "-7"),
        ("pages 5-3 remain", "3"),
        ("no number at all", None),
        ("", None),
        (None, None),
    ],
)
def test_gsm8k_extraction(text: str | None, expected: str | None) -> None:
    assert extract_gsm8k_answer(text) == expected


@pytest.mark.parametrize(
    ("solution", "truth", "expected"),
    [
        ("... #### 72", "72", 1.0),
        ("the answer is 72", "72", 1.0),
        ("the answer is $1,000.00", "1000", 1.0),
        ("#### 72.0", "72", 1.0),
        ("#### 71", "72", 0.0),
        ("no idea", "72", 0.0),
        ("#### 72", "Natalia sold ... 24 + 48 = 72\n#### 72", 1.0),  # ground truth as a full solution
        ("#### 72", 72, 1.0),  # numeric ground truth
        ("#### 0.5", ".50", 1.0),
    ],
)
def test_gsm8k_reward(solution: str, truth: object, expected: float) -> None:
    assert gsm8k_reward("openai/gsm8k", solution, truth, {}) == expected


# ---------------------------------------------------------------------------------------------
# score_episode
# ---------------------------------------------------------------------------------------------


class Observer:
    """A real in-process plugin that records what on_episode_end saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None]] = []

    @hookimpl
    def on_episode_end(self, episode: Episode) -> None:
        self.seen.append((episode.id, episode.reward))


def _bad_string(data_source, solution_str, ground_truth, extra_info):
    return "1.0"


def _bad_none(data_source, solution_str, ground_truth, extra_info):
    return None


def _bad_nan(data_source, solution_str, ground_truth, extra_info):
    return math.nan


def _bad_bool(data_source, solution_str, ground_truth, extra_info):
    return True


def _raises(data_source, solution_str, ground_truth, extra_info):
    raise RuntimeError("reward server unreachable")


async def _async_half(data_source, solution_str, ground_truth, extra_info):
    return 0.5


SEEN_BY_TRAJECTORY_REWARD: list[tuple[Episode, Sample]] = []


def _steps_reward(episode: Episode, sample: Sample) -> float:
    SEEN_BY_TRAJECTORY_REWARD.append((episode, sample))
    return 1.0 / (1 + len(episode.steps))


class RewardPlugin:
    @hookimpl
    def register_rewards(self) -> list[RewardSpec]:
        return [
            RewardSpec("bad_string", "returns a string", _bad_string),
            RewardSpec("bad_none", "returns None", _bad_none),
            RewardSpec("bad_nan", "returns NaN", _bad_nan),
            RewardSpec("bad_bool", "returns a bool", _bad_bool),
            RewardSpec("raises", "raises", _raises),
            RewardSpec("async_half", "async", _async_half),
            RewardSpec("steps", "trajectory-aware", _steps_reward, trajectory_aware=True),
        ]


@pytest.fixture
def manager() -> PluginManager:
    pm = PluginManager(load_entry_points=False)
    pm.register(RewardPlugin(), name="test-rewards")
    return pm


def _episode(status: EpisodeStatus = EpisodeStatus.SUCCESS, answer: str | None = "#### 72") -> Episode:
    episode = Episode(task_id="t1", agent_id="a", final_answer=answer)
    episode.steps.append(
        TrajectoryStep(exp_meta=ExpMeta(task_id="t1", agent_id="a", step=0), exp_data=ExpData())
    )
    episode.finish(status, error=None if status is EpisodeStatus.SUCCESS else "boom")
    return episode


SAMPLE = Sample(id="s1", prompt=[{"role": "user", "content": "q"}], ground_truth="72", data_source="openai/gsm8k")


async def test_builtin_reward_scored_and_observed(manager: PluginManager) -> None:
    observer = Observer()
    manager.register(observer, name="observer")
    stats = RewardStats()
    episode = await score_episode(_episode(), SAMPLE, "gsm8k", plugin_manager=manager, stats=stats)
    assert episode.reward == 1.0 and episode.rewards == {"gsm8k": 1.0} and episode.reward_errors == {}
    assert observer.seen == [(episode.id, 1.0)]
    assert stats.count == 1 and stats.mean == 1.0 and stats.failures == 0


async def test_several_rewards_are_summed(manager: PluginManager) -> None:
    episode = _episode(answer="<answer>#### 72</answer>")
    await score_episode(episode, SAMPLE, ["gsm8k", RewardSection(name="format")], plugin_manager=manager,
                        stats=RewardStats())
    assert episode.rewards == {"gsm8k": 1.0, "format": 0.1}
    assert episode.reward == pytest.approx(1.1)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("raises", "RuntimeError: reward server unreachable"),
        ("bad_string", "returned '1.0' (str)"),
        ("bad_none", "returned None"),
        ("bad_nan", "returned nan"),
        ("bad_bool", "returned True (bool)"),
    ],
)
async def test_reward_errors_are_recorded_not_zeroed(manager: PluginManager, name: str, needle: str) -> None:
    observer = Observer()
    manager.register(observer, name="observer")
    stats = RewardStats()
    episode = await score_episode(_episode(), SAMPLE, name, plugin_manager=manager, stats=stats)
    assert episode.reward is None
    assert name not in episode.rewards
    assert needle in episode.reward_errors[name]
    assert observer.seen == [(episode.id, None)]  # observers still see the episode
    assert stats.failures == 1 and stats.count == 0 and stats.mean is None
    assert stats.as_metrics()[f"reward/{name}/failures"] == 1


async def test_one_failing_reward_of_two_leaves_reward_none(manager: PluginManager) -> None:
    episode = await score_episode(_episode(), SAMPLE, ["gsm8k", "raises"], plugin_manager=manager,
                                  stats=RewardStats())
    assert episode.rewards == {"gsm8k": 1.0}
    assert "raises" in episode.reward_errors
    assert episode.reward is None


async def test_async_reward(manager: PluginManager) -> None:
    episode = await score_episode(_episode(), SAMPLE, "async_half", plugin_manager=manager, stats=RewardStats())
    assert episode.reward == 0.5


async def test_trajectory_aware_reward_sees_the_episode(manager: PluginManager) -> None:
    SEEN_BY_TRAJECTORY_REWARD.clear()
    episode = _episode()
    await score_episode(episode, SAMPLE, "steps", plugin_manager=manager, stats=RewardStats())
    assert SEEN_BY_TRAJECTORY_REWARD == [(episode, SAMPLE)]
    assert SEEN_BY_TRAJECTORY_REWARD[0][0] is episode
    assert episode.reward == 0.5


@pytest.mark.parametrize("status", [EpisodeStatus.FAILED, EpisodeStatus.TIMEOUT, EpisodeStatus.CANCELLED])
async def test_unsuccessful_episodes_are_not_scored(manager: PluginManager, status: EpisodeStatus) -> None:
    observer = Observer()
    manager.register(observer, name="observer")
    stats = RewardStats()
    episode = await score_episode(_episode(status), SAMPLE, "gsm8k", plugin_manager=manager, stats=stats)
    assert episode.reward is None and episode.rewards == {} and episode.reward_errors == {}
    assert episode.status is status
    assert observer.seen == [(episode.id, None)]
    assert stats.skipped == 1 and stats.count == 0


async def test_running_episode_is_refused(manager: PluginManager) -> None:
    episode = Episode(task_id="t", agent_id="a")
    with pytest.raises(UsageError, match="still running"):
        await score_episode(episode, SAMPLE, "gsm8k", plugin_manager=manager)


# ---------------------------------------------------------------------------------------------
# user rewards from files and modules
# ---------------------------------------------------------------------------------------------


def _write(directory: Path, name: str, code: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(code))
    return path


async def test_user_reward_from_relative_file(tmp_path: Path, manager: PluginManager) -> None:
    _write(tmp_path, "my_reward.py", """
        def score(data_source, solution_str, ground_truth, extra_info):
            return 1.0 if ground_truth in solution_str and extra_info["bonus"] else 0.25
    """)
    sample = SAMPLE.model_copy(update={"extra_info": {"bonus": True}})
    episode = await score_episode(_episode(), sample, "my_reward.py:score", base_dir=str(tmp_path),
                                  plugin_manager=manager, stats=RewardStats())
    assert episode.rewards == {"my_reward.py:score": 1.0}


async def test_user_trajectory_reward_detected_from_signature(tmp_path: Path, manager: PluginManager) -> None:
    path = _write(tmp_path, "traj_reward.py", """
        async def score(episode, sample):
            return float(len(episode.steps)) + (0.5 if sample.id == "s1" else 0.0)
    """)
    episode = await score_episode(_episode(), SAMPLE, f"{path}:score", plugin_manager=manager, stats=RewardStats())
    assert episode.reward == 1.5


async def test_explicit_trajectory_flag_from_section(tmp_path: Path, manager: PluginManager) -> None:
    _write(tmp_path, "kw_reward.py", """
        def score(**kwargs):
            return 1.0 if set(kwargs) == {"episode", "sample"} else 0.0
    """)
    section = RewardSection(name="kw_reward.py:score", trajectory_aware=True)
    episode = await score_episode(_episode(), SAMPLE, section, base_dir=str(tmp_path), plugin_manager=manager,
                                  stats=RewardStats())
    assert episode.reward == 1.0


async def test_module_reference(manager: PluginManager) -> None:
    episode = await score_episode(_episode(), SAMPLE, "aworld_core.rewards.builtin:gsm8k_reward",
                                  plugin_manager=manager, stats=RewardStats())
    assert episode.reward == 1.0


async def test_unknown_reward_names_registered_ones(manager: PluginManager) -> None:
    with pytest.raises(UsageError) as info:
        await score_episode(_episode(), SAMPLE, "gsm9k", plugin_manager=manager, stats=RewardStats())
    message = str(info.value)
    assert "unknown reward 'gsm9k'" in message
    assert "format, gsm8k" in message
    assert "path/to/file.py:func" in message and "package.module:func" in message


async def test_missing_file_and_wrong_signature_raise(tmp_path: Path, manager: PluginManager) -> None:
    with pytest.raises(UsageError, match="not found"):
        await score_episode(_episode(), SAMPLE, "nope.py:score", base_dir=str(tmp_path), plugin_manager=manager)
    _write(tmp_path, "two_args.py", """
        def score(prediction, target):
            return 1.0
    """)
    with pytest.raises(UsageError, match=r"data_source, solution_str, ground_truth, extra_info"):
        await score_episode(_episode(), SAMPLE, "two_args.py:score", base_dir=str(tmp_path),
                            plugin_manager=manager)


def test_resolve_and_compute_directly(manager: PluginManager) -> None:
    resolved = resolve_reward("steps", plugin_manager=manager)
    assert resolved.trajectory_aware and "test-rewards" in resolved.source
    assert compute_named_reward("gsm8k", _episode(), SAMPLE, plugin_manager=manager) == 1.0


def test_solution_text_fallbacks() -> None:
    episode = Episode(task_id="t", agent_id="a", final_answer="final")
    assert solution_text(episode) == "final"
    episode = Episode(
        task_id="t", agent_id="a",
        messages=[{"role": "assistant", "content": "first"}, {"role": "tool", "content": "x"},
                  {"role": "assistant", "content": [{"type": "text", "text": "last"}]}],
    )
    assert solution_text(episode) == "last"
    episode = Episode(task_id="t", agent_id="a")
    episode.steps.append(TrajectoryStep(exp_meta=ExpMeta(task_id="t", agent_id="a", step=0),
                                        exp_data=ExpData(llm_call=LLMCall(content="from the call"))))
    assert solution_text(episode) == "from the call"
    assert solution_text(Episode(task_id="t", agent_id="a")) == ""


# ---------------------------------------------------------------------------------------------
# conventions resolved once
# ---------------------------------------------------------------------------------------------


def _trl_column(completions, ground_truth, bonus, trainer_state=None):
    """TRL-style without **kwargs: gets only the names it declares (bonus is a dataset column)."""
    text = completions[0][-1]["content"]
    return [float(ground_truth[0] in text) + bonus[0]]


async def _trl_async(prompts, completions, completion_ids, **kwargs):
    return [len(prompts[0]) + len(completions[0]) + len(completion_ids[0])]


def _trl_two_values(completions, **kwargs):
    return [1.0, 2.0]


class TrlPlugin:
    @hookimpl
    def register_rewards(self) -> list[RewardSpec]:
        return [RewardSpec("trl_column", "TRL-style, a dataset column", _trl_column),
                RewardSpec("trl_async", "TRL-style, async", _trl_async),
                RewardSpec("trl_two", "TRL-style, a batch of two for one", _trl_two_values)]


def test_a_convention_a_plugin_registers_applies_only_while_it_is_installed(manager: PluginManager) -> None:
    from aworld_core.rewards.conventions import PLAIN

    manager.register(TrlPlugin(), name="trl-rewards")
    # without aworld-trl no convention claims (completions, **kwargs): plain, and the check says why
    reward = resolve_reward("trl_column", plugin_manager=manager)
    assert reward.convention is PLAIN
    with pytest.raises(UsageError, match="applies only while that plugin is installed"):
        reward.check()


async def test_each_convention_is_an_adapter_chosen_at_resolution(manager: PluginManager) -> None:
    import aworld_trl.plugin
    from aworld_core.rewards.conventions import PLAIN, TRAJECTORY
    from aworld_trl.rewards import TRL

    manager.register(TrlPlugin(), name="trl-rewards")
    manager.register(aworld_trl.plugin, name="trl")  # TRL's convention is aworld-trl's registration
    assert resolve_reward("gsm8k", plugin_manager=manager).convention is PLAIN
    assert resolve_reward("steps", plugin_manager=manager).convention is TRAJECTORY
    trl = resolve_reward("trl_column", plugin_manager=manager)
    assert trl.convention is TRL and not trl.trajectory_aware
    sample = SAMPLE.model_copy(update={"extra_info": {"bonus": 0.5, "not an identifier": 1}})
    episode = _episode()
    episode.messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 72"}]
    scored = await score_episode(episode, sample, ["trl_column", "trl_async"], plugin_manager=manager,
                                 stats=RewardStats())
    assert scored.rewards == {"trl_column": 1.5, "trl_async": 2.0}  # 1 prompt + 1 completion message + 0 ids
    scored = await score_episode(_episode(), sample, "trl_two", plugin_manager=manager, stats=RewardStats())
    assert scored.reward is None and "must return a list of one number" in scored.reward_errors["trl_two"]


async def test_a_reward_is_resolved_once_and_its_signature_never_read_per_call(
    manager: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    import inspect

    first = resolve_reward("gsm8k", plugin_manager=manager)
    assert resolve_reward("gsm8k", plugin_manager=manager) is first
    assert resolve_reward("gsm8k", trajectory_aware=False, plugin_manager=manager) is not first

    def no_signature(*args, **kwargs):
        raise AssertionError("inspect.signature called while scoring")

    for name in ("steps", "async_half"):  # resolved (signature read) at their first use
        await score_episode(_episode(), SAMPLE, name, plugin_manager=manager, stats=RewardStats())

    monkeypatch.setattr(inspect, "signature", no_signature)
    for name in ("gsm8k", "steps", "async_half"):
        scored = await score_episode(_episode(), SAMPLE, name, plugin_manager=manager, stats=RewardStats())
        assert scored.reward is not None, scored.reward_errors
    monkeypatch.undo()
    manager.register(TrlPlugin(), name="trl-rewards")  # a new plugin set: resolved again
    assert resolve_reward("gsm8k", plugin_manager=manager) is not first


async def test_a_plugin_owning_a_name_through_the_hook_still_comes_first(manager: PluginManager) -> None:
    class Owner:
        @hookimpl
        def compute_reward(self, name, episode, sample):
            return 0.25 if name in ("gsm8k", "only-mine") else None

    manager.register(Owner(), name="owner")
    scored = await score_episode(_episode(), SAMPLE, ["gsm8k", "only-mine", "format"], plugin_manager=manager,
                                 stats=RewardStats())
    assert scored.rewards == {"gsm8k": 0.25, "only-mine": 0.25, "format": 0.0}


async def test_the_gaia_reward_without_aworld_gaia_env_says_what_to_install(manager: PluginManager) -> None:
    with pytest.raises(UsageError, match=r"reward 'gaia' is provided by the aworld-gaia-env plugin.*"
                                         r"pip install aworld-gaia-env"):
        await score_episode(_episode(), SAMPLE, "gaia", plugin_manager=manager, stats=RewardStats())
