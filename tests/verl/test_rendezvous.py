"""verl's side of the group rendezvous: the V0 group-size check (the rendezvous itself is the worker
kit's, tested in tests/core/test_worker_kit.py; through verl's real workers: test_v1_groups.py and
test_failures_and_limits.py)."""

from __future__ import annotations


def test_a_v0_group_of_another_size_than_n_warns_once(caplog):
    """Under V0 the loop knows the phase only from its sampling settings: training's ``n`` or
    validation's ``val_kwargs.n``; a group of another size was cut across workers."""
    from omegaconf import OmegaConf

    import aworld_verl.groups as loop

    rollout = OmegaConf.create({"n": 4, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                "val_kwargs": {"n": 2, "temperature": 1.0, "top_p": 0.6, "top_k": -1}})
    train = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    val = {**train, "top_p": 0.6}
    assert loop.expected_group_sizes(rollout, train) == {4}
    assert loop.expected_group_sizes(rollout, val) == {2}
    assert loop.expected_group_sizes(rollout, {**train, "temperature": 0}) == set()  # neither: unchecked
    same = OmegaConf.merge(rollout, {"val_kwargs": {"top_p": 1.0}})
    assert loop.expected_group_sizes(same, train) == {2, 4}

    loop._warned_v0_group = False
    with caplog.at_level("WARNING", logger="aworld_verl.agent_loop"):
        assert loop.check_v0_group_size(4, {4}, "u0") and loop.check_v0_group_size(3, set(), "u0")
        assert "closed in this worker" not in caplog.text
        assert not loop.check_v0_group_size(3, {4}, "u1")
        assert not loop.check_v0_group_size(1, {4}, "u2")
    assert caplog.text.count("closed in this worker") == 1
    assert "u1" in caplog.text and "expected 4" in caplog.text and "num_workers" in caplog.text
    loop._warned_v0_group = False
