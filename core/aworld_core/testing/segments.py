"""``check_segments``: an episode's training segments against what the engine sampled, exactly.

For tests of any client, backend or agent that drives a ``TokenLLM``: given the episode's
``TrainingView`` and the engine's calls for its session (a ``ScriptedTokenEngine``'s ``calls``, or
any ``(prompt_ids, TokenOutput)`` pairs in order), it checks that

* every call's prompt is a prefix of one segment, segment by segment in order, and each segment's
  ``prompt_ids`` is exactly the prompt of its first call;
* each call's sampled ids sit right after its prompt with mask 1, their logprobs and versions 1:1
  (a truncated segment's last call may be cut at the budget);
* every mask-1 token of every segment is one of those sampled ids (nothing else trains), and
  every env token has logprob 0.0 and version -1;
* every call is in a segment (nothing sampled is left out).

It raises ``AssertionError`` naming the segment, the call and what differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from aworld_core.schemas import TrainingSegment, TrainingView


def _pairs(calls: Iterable[Any]) -> list[tuple[list[int], Any]]:
    out = []
    for call in calls:
        if isinstance(call, tuple):
            prompt, output = call
        else:
            prompt, output = call.prompt_ids, call.output
        out.append((list(prompt), output))
    return out


def check_segments(view: TrainingView | Sequence[TrainingSegment], calls: Iterable[Any]) -> list[list[int]]:
    """Check ``view``'s segments against ``calls`` (see the module docstring); returns, per segment,
    the indices of the calls it holds."""
    segments = view.segments() if isinstance(view, TrainingView) else list(view)
    pairs = _pairs(calls)
    held: list[list[int]] = []
    c = 0
    for k, seg in enumerate(segments):
        n = len(seg.response_ids)
        assert len(seg.response_mask) == len(seg.response_logprobs) == len(seg.response_versions) == n, (
            f"segment {k}: misaligned response parts"
        )
        full = [*seg.prompt_ids, *seg.response_ids]
        assert c < len(pairs), f"segment {k} holds no engine call (only {len(pairs)} calls)"
        assert pairs[c][0] == seg.prompt_ids, f"segment {k}: prompt_ids differ from the prompt of call {c}"
        covered = [False] * n
        mine: list[int] = []
        end = 0  # where the previous call's sampled ids ended (response positions)
        while c < len(pairs):
            prompt, out = pairs[c]
            start = len(prompt) - len(seg.prompt_ids)
            ids = list(out.token_ids)
            got = seg.response_ids[start : start + len(ids)] if start >= end else None
            if got is None or full[: len(prompt)] != prompt or got != ids[: len(got)]:
                break  # not this segment's: the next segment must begin with it
            if len(got) < len(ids):  # cut at the response budget: the segment's last call
                assert seg.truncated, f"segment {k}: call {c}'s sampled ids run past the end of an uncut segment"
            lps = list(out.logprobs) if out.logprobs is not None else None
            versions = out.versions()
            for j in range(len(got)):
                at = start + j
                assert seg.response_mask[at] == 1, f"segment {k}: call {c}'s sampled token {j} has mask 0"
                if lps is not None:
                    assert seg.response_logprobs[at] == float(lps[j]), f"segment {k}: call {c}'s logprob {j} differs"
                assert seg.response_versions[at] == versions[j], f"segment {k}: call {c}'s version {j} differs"
                covered[at] = True
            mine.append(c)
            end = start + len(got)
            c += 1
            if len(got) < len(ids):
                break
        for i, m in enumerate(seg.response_mask):
            if m:
                assert covered[i], f"segment {k}: response token {i} has mask 1 but no engine call sampled it"
            else:
                assert seg.response_logprobs[i] == 0.0 and seg.response_versions[i] == -1, (
                    f"segment {k}: env token {i} has a logprob or version"
                )
        held.append(mine)
    assert c == len(pairs), (
        f"engine calls {list(range(c, len(pairs)))} are in no segment: their sampled tokens would not train"
    )
    return held
