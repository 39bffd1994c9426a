"""``engine.extraArgs`` read the way vLLM's own parser reads it, against vLLM's own flags.

The flags come from ``catalog/vllm_flags.json``, generated from the pinned vLLM's server parser
(``make vllm-flags``; tests/contract/test_vllm_flags.py fails when it drifts). Why a table and not a pattern:
that parser is an ``argparse`` parser with ``allow_abbrev`` on, so ``--max-num-seq=64`` sets
``max_num_seqs`` (a typed field's flag slipped past a pattern of full names), and an unknown token with a
space (``--foo; rm -rf /``) is taken as the optional positional ``model_tag``, which the server ignores.

Every check here exists twice, as the rest of the API's rules: a Python function (``qwen-fleet render``,
the operator) and a CEL expression (the apiserver, at ``kubectl apply``), built from the same table and
meaning the same thing; tests/integration/test_crd_admission.py checks the apiserver gives the same message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, cached_property
from importlib.resources import files

# argparse's own test for "a negative number, so a value and not a flag" (``_negative_number_matcher``),
# with ASCII digits: the apiserver's regex engine reads \d as ASCII only.
NEGATIVE_NUMBER = r"^-[0-9]+$|^-[0-9]*[.][0-9]+$"
_NEGATIVE_NUMBER_RE = re.compile(NEGATIVE_NUMBER)
# How far the closest-flag score looks from either end of a flag; vLLM's longest flag has 43 characters.
_SCORE_SPAN = 48


@dataclass(frozen=True)
class Flag:
    dest: str
    options: tuple[str, ...]
    nargs: str  # "0" (a switch), "1", "?", "+" or "*"


@dataclass(frozen=True)
class FlagTable:
    vllm: str
    flags: tuple[Flag, ...]

    @cached_property  # built once: every token of every extraArgs list looks it up
    def by_option(self) -> dict[str, Flag]:
        return {option: flag for flag in self.flags for option in flag.options}

    @cached_property
    def options(self) -> list[str]:
        """Every option string, in the table's order (ties in the closest-flag score go to the first)."""
        return [option for flag in self.flags for option in flag.options]


@cache
def vllm_flags() -> FlagTable:
    raw = json.loads(files("qwen_fleet.catalog").joinpath("vllm_flags.json").read_text())
    return FlagTable(vllm=raw["vllm"], flags=tuple(Flag(f["dest"], tuple(f["options"]), f["nargs"])
                                                   for f in raw["flags"]))


def flag_key(token: str) -> str | None:
    """The option string argparse looks up for ``token`` once vLLM's ``FlexibleArgumentParser`` has rewritten
    it, or None when the token is a value.

    The rewrites: ``--a_b`` is ``--a-b`` (underscores before the first dot); ``--json-arg.key v`` sets one key
    of ``--json-arg``; ``-O3``, ``-O=3`` and ``-O 3`` are ``--optimization-level``.
    """
    if not token.startswith("-") or _NEGATIVE_NUMBER_RE.match(token):
        return None
    if token.startswith("--"):
        return "--" + token[2:].split("=", maxsplit=1)[0].split(".", maxsplit=1)[0].replace("_", "-")
    if token.startswith("-O"):
        return "--optimization-level"
    return token.split("=", maxsplit=1)[0].split(".", maxsplit=1)[0]


def resolve(key: str) -> list[str]:
    """The option strings argparse (allow_abbrev) could take ``key`` for: itself when exact, else every option
    it abbreviates, plus for a single-dash key an exact short option with its value attached (``-qawq``).
    One element: argparse takes it; several: argparse exits (ambiguous); none: unknown."""
    table = vllm_flags().by_option
    if key in table:
        return [key]
    found = [option for option in table if option.startswith(key)]
    if not key.startswith("--") and len(key) > 2 and key[:2] in table:
        found.append(key[:2])
    return found


def owned_dest(key: str, owned: frozenset[str]) -> bool:
    """Whether vLLM reads ``key`` as one of the ``owned`` option strings: exactly, or as an abbreviation of
    exactly one option string (what argparse accepts), or a short option with its value attached."""
    table = vllm_flags().by_option
    if key in table:
        return key in owned
    prefixed = [option for option in table if option.startswith(key)]
    if len(prefixed) == 1 and prefixed[0] in owned:
        return True
    return not key.startswith("--") and len(key) > 2 and key[:2] in owned


def closeness(key: str, option: str) -> int:
    """How alike two flags are: the characters they share at the start plus those they share at the end (each
    end counted up to _SCORE_SPAN), less the difference in length. A typo anywhere leaves one of the two
    ends long; the length term prefers --max-loras to --max-lora-cls-labels for --max-loraz. CEL computes
    the same (_cel_closeness)."""
    span = range(1, min(len(option), _SCORE_SPAN) + 1)
    return (sum(1 for n in span if key.startswith(option[:n]))
            + sum(1 for n in span if key.endswith(option[-n:])) - abs(len(key) - len(option)))


def closest_option(key: str) -> str | None:
    """The table's option most like ``key``; None when nothing shares at least half of it."""
    options = vllm_flags().options
    scores = [closeness(key, option) for option in options]
    best = max(scores)
    return options[scores.index(best)] if 2 * best >= len(key) else None


_LISTED = 6  # an ambiguous abbreviation lists the flags it could be, up to this many


def unknown_flag_message(key: str) -> str:
    """What a person reads for a refused flag: the flag it abbreviates, the flags it could abbreviate, or the
    closest flag (a misspelling); cel_unknown_flag_message() builds the very same text."""
    prefixed = [option for option in vllm_flags().options if option.startswith(key)]
    suggestion = closest_option(key)
    if len(prefixed) == 1:
        hint = f"; did you mean {prefixed[0]}?"
    elif 1 < len(prefixed) <= _LISTED:
        hint = f"; it could be any of {', '.join(prefixed)}"
    elif prefixed:
        hint = f"; it abbreviates more than {_LISTED} flags"  # no count: CEL's string(int) has no size bound
    elif suggestion:
        hint = f"; did you mean {suggestion}?"
    else:
        hint = "; see docs/vllm-contract.md for the flags"
    return f"engine.extraArgs: {key} is not a flag of vLLM {vllm_flags().vllm} (write flags in full){hint}"


def first_unknown_flag(args: list[str] | tuple[str, ...], owned: frozenset[str]) -> str | None:
    """The first flag key in ``args`` that is neither a vLLM flag written in full nor a typed field's flag
    (those have their own message)."""
    for token in args:
        key = flag_key(token)
        if key is not None and key not in vllm_flags().by_option and not owned_dest(key, owned):
            return key
    return None



def takes_values(token: str, count: int) -> bool:
    """Whether vLLM gives the flag ``token`` the ``count`` tokens that follow it as its values."""
    if "=" in token:  # the value is attached: --flag=value, -tp=2
        return False
    if "." in token:  # --json-flag.key: FlexibleArgumentParser takes exactly the next token
        return count == 1
    if token.startswith("-O") and not token.startswith("--") and token != "-O":  # -O3
        return False
    flag = vllm_flags().by_option.get(str(flag_key(token)))
    if flag is None:  # an unknown or abbreviated flag, refused by its own rule
        return True
    return flag.nargs in ("+", "*") or (flag.nargs in ("1", "?") and count == 1)


def first_stray_value(args: list[str] | tuple[str, ...]) -> str | None:
    """The first value no flag before it takes: vLLM's parser makes it the ignored ``model_tag`` positional
    (``--enable-log-requests true``: the ``true`` is dropped without a word)."""
    last_flag: int | None = None
    for i, token in enumerate(args):
        if flag_key(token) is not None:
            last_flag = i
        elif last_flag is None or not takes_values(args[last_flag], i - last_flag):
            return token
    return None


_STRAY = ("is not the value of the flag before it (vLLM would ignore it); a flag and its value are two items, "
          "and a switch takes none")


def stray_value_message(token: str) -> str:
    return f'engine.extraArgs: "{token}" {_STRAY}'  # cel_stray_value_message() builds the same text

# --- the same checks in CEL, for the CRD ------------------------------------------------------------------
# Written without split() (its result's size is unknown to the apiserver's cost estimator) and with
# one-element lists as bindings (`[x].all(k, ...)`): this Kubernetes has no cel.bind.


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(_cel_string(v) for v in values) + "]"


def _cel_set(values: list[str]) -> str:
    return "{" + ", ".join(f"{_cel_string(v)}: true" for v in values) + "}"


def _cel_before(text: str, sep: str) -> str:
    return f"({text}.contains('{sep}') ? {text}.substring(0, {text}.indexOf('{sep}')) : {text})"


def cel_is_flag(token: str) -> str:
    return f"({token}.startsWith('-') && !{token}.matches('{NEGATIVE_NUMBER}'))"


def cel_flag_key(token: str) -> str:
    """flag_key() in CEL, for a token already known to be a flag."""
    long_key = _cel_before(_cel_before(f"{token}.substring(2)", "="), ".")
    short_key = _cel_before(_cel_before(token, "="), ".")
    return (f"({token}.startsWith('--') ? '--' + {long_key}.replace('_', '-') : "
            f"{token}.startsWith('-O') ? '--optimization-level' : {short_key})")


def cel_owned(key: str) -> str:
    """owned_dest() in CEL, with the table bound to ``t`` and the owned options to ``o`` (cel_with_tables)."""
    return (f"({key} in t ? {key} in o : "
            f"(t.filter(c, c.startsWith({key})).size() == 1 && o.exists(c, c.startsWith({key}))) || "
            f"(!{key}.startsWith('--') && size({key}) > 2 && {key}.substring(0, 2) in o))")


def cel_with_tables(owned: frozenset[str], expression: str) -> str:
    """Bind vLLM's options to ``t`` and the owned ones to ``o`` once (each literal is ~10 kB of the CRD)."""
    table = vllm_flags().options
    return f"[{_cel_list(table)}].all(t, [{_cel_list([x for x in table if x in owned])}].all(o, {expression}))"


def cel_each_flag_key(args: str, test: str) -> str:
    """``args.all(...)``: every flag token's key ``k`` passes ``test`` (a CEL expression of ``k``)."""
    return f"{args}.all(a, !{cel_is_flag('a')} || [{cel_flag_key('a')}].all(k, {test}))"


def cel_known_or_owned() -> str:
    return f"k in t || {cel_owned('k')}"


def _cel_closeness(key: str, option: str) -> str:
    span = f"lists.range({_SCORE_SPAN})"
    return (f"({span}.filter(i, i < size({option}) && {key}.startsWith({option}.substring(0, i + 1))).size() + "
            f"{span}.filter(i, i < size({option}) && "
            f"{key}.endsWith({option}.substring(size({option}) - i - 1))).size() - "
            f"(size({key}) > size({option}) ? size({key}) - size({option}) : size({option}) - size({key})))")


def cel_unknown_flag_message(args: str, owned: frozenset[str]) -> str:
    """unknown_flag_message() of first_unknown_flag() in CEL (a messageExpression).

    Shaped by the apiserver's cost estimate, which must stay finite: every concatenation happens inside a
    comprehension over a list whose elements have a known size (an element taken out of a computed list by
    [0] has none), and the best score is bound as an int, the flag then found again by it."""
    table = vllm_flags().options
    first = (f"{args}.filter(a, {cel_is_flag('a')} && [{cel_flag_key('a')}].all(k, !({cel_known_or_owned()})))"
             f".map(a, {cel_flag_key('a')})[0]")
    head = f"'engine.extraArgs: ' + k + ' is not a flag of vLLM {vllm_flags().vllm} (write flags in full)'"
    prefixed = "t.filter(c, c.startsWith(k))"
    closeness = _cel_closeness("k", "c")
    closest = (f"[t.map(c, {closeness}).max()].map(b, 2 * b >= size(k) ? t.filter(c, {closeness} == b)"
               f".map(c, {head} + '; did you mean ' + c + '?')[0] : "
               f"{head} + '; see docs/vllm-contract.md for the flags')[0]")
    message = (f"size({prefixed}) == 1 ? {prefixed}.map(c, {head} + '; did you mean ' + c + '?')[0] : "
               f"size({prefixed}) > {_LISTED} ? {head} + '; it abbreviates more than {_LISTED} flags' : "
               f"size({prefixed}) > 1 ? {head} + '; it could be any of ' + {prefixed}.join(', ') : {closest}")
    body = f"[{first}].map(k, {message})[0]"
    return (f"[{_cel_list(table)}].map(t, [{_cel_list([x for x in table if x in owned])}].map(o, {body})[0])[0]")



def _cel_nargs() -> str:
    return "{" + ", ".join(f"{_cel_string(o)}: {_cel_string(f.nargs)}" for f in vllm_flags().flags
                           for o in f.options) + "}"


def _cel_flag_or_claimed(args: str, limit: int) -> str:
    """Token ``i`` of ``args`` is a flag, or a value the last flag before it takes. Expects the nargs map bound
    to ``m`` and, bound to ``g``, whether each index holds a flag (worked out once: the regex of cel_is_flag
    inside the scan for the last flag would cost the apiserver's estimate 64 x 64 matches)."""
    takes = ("!f.contains('=') && (f.contains('.') ? n == 1 : "
             "(f.startsWith('-O') && !f.startsWith('--') && f != '-O') ? false : "
             f"[{cel_flag_key('f')}].all(k, !(k in m) || m[k] == '+' || m[k] == '*' || "
             "((m[k] == '1' || m[k] == '?') && n == 1)))")
    claimed = (f"lists.range({limit}).exists(j, j < i && g[j]) && "
               f"[lists.range({limit}).filter(j, j < i && g[j]).max()].all(j, "
               f"[{args}[j]].all(f, [i - j].all(n, {takes})))")
    return f"(g[i] || ({claimed}))"


def _cel_with_flag_index(args: str, limit: int, expression: str, bind: str = "all") -> str:
    flags = f"lists.range({limit}).map(j, j < size({args}) && {cel_is_flag(f'{args}[j]')})"
    return f"[{_cel_nargs()}].{bind}(m, [{flags}].{bind}(g, {expression}))"


def cel_no_stray_value(args: str, limit: int) -> str:
    """first_stray_value() is None, in CEL (``limit``: the list's maxItems; ranges of a known size keep the
    cost estimate finite)."""
    return _cel_with_flag_index(args, limit, f"lists.range({limit}).all(i, i >= size({args}) || "
                                             f"{_cel_flag_or_claimed(args, limit)})")


def cel_stray_value_message(args: str, limit: int) -> str:
    """stray_value_message() of the first stray value, in CEL."""
    first = (f"lists.range({limit}).filter(i, i < size({args}) && !{_cel_flag_or_claimed(args, limit)})"
             f".map(i, 'engine.extraArgs: \"' + {args}[i] + '\" {_STRAY}')[0]")
    return _cel_with_flag_index(args, limit, first, bind="map") + "[0]" + "[0]"
