"""GAIA's answer scorer, re-implemented with the official ``question_scorer`` semantics.

Leaderboard numbers are only comparable when a trained agent is scored exactly as GAIA scores
it, so the rules below follow the official scorer (including its quirks) rather than improving
on them:

* a ground truth that parses as a float is compared as a number, after ``$``, ``%`` and ``,``
  are removed from the model answer; an answer that still does not parse is wrong;
* a ground truth holding ``,`` or ``;`` is a list: both sides are split on either separator,
  must have the same length, and are compared element by element (numbers as numbers, strings
  without whitespace and lower-cased, punctuation kept, as upstream does inside lists);
* anything else is compared as a string with all whitespace and punctuation removed, lower-cased.
"""

from __future__ import annotations

import math
import re
import string

_SEPARATORS = re.compile(r"[,;]")
_WHITESPACE = re.compile(r"\s")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_NUMBER_NOISE = ("$", "%", ",")


def is_float(text: str) -> bool:
    """Whether Python's ``float()`` accepts ``text`` (so ``"inf"``, ``"1e3"`` and ``" 2 "`` count)."""
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def normalize_number_str(text: str) -> float:
    """``text`` as a float after removing ``$``, ``%`` and ``,``; ``inf`` when it is not a number.

    ``inf`` never equals a finite ground truth, which is how the official scorer marks an
    unparseable answer as wrong.
    """
    for char in _NUMBER_NOISE:
        text = text.replace(char, "")
    try:
        return float(text)
    except ValueError:
        return math.inf


def split_string(text: str) -> list[str]:
    """Split on ``,`` and ``;`` (either one, mixed), keeping empty pieces as upstream does."""
    return _SEPARATORS.split(text)


def normalize_str(text: str, remove_punct: bool = True) -> str:
    """Remove all whitespace, lower-case, and (by default) remove ASCII punctuation."""
    compact = _WHITESPACE.sub("", text).lower()
    return compact.translate(_NO_PUNCTUATION) if remove_punct else compact


def question_scorer(model_answer: str | None, ground_truth: str) -> bool:
    """True when ``model_answer`` is right for ``ground_truth`` under GAIA's rules."""
    answer = "None" if model_answer is None else str(model_answer)  # upstream scores str(None)
    truth = str(ground_truth)
    if is_float(truth):
        return normalize_number_str(answer) == float(truth)
    if any(sep in truth for sep in ",;"):
        truth_items = split_string(truth)
        answer_items = split_string(answer)
        if len(truth_items) != len(answer_items):
            return False
        for answer_item, truth_item in zip(answer_items, truth_items, strict=True):
            if is_float(truth_item):
                if normalize_number_str(answer_item) != float(truth_item):
                    return False
            elif normalize_str(answer_item, remove_punct=False) != normalize_str(truth_item, remove_punct=False):
                return False
        return True
    return normalize_str(answer) == normalize_str(truth)
