"""Nomad's filter language (go-bexpr): parsing, error messages and evaluation on wire dicts.

Syntax-error messages marked "go-bexpr vectors" are the expected outputs of go-bexpr's grammar
tests; the rest follow from its grammar as described in the behaviour reference (section 12).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocbridge.model.filter import (
    MAX_NESTING,
    NOMAD_ALLOCATION_SHAPE,
    DatumShape,
    Filter,
    FilterError,
    FilterEvaluationError,
    FilterSyntaxError,
    compile_filter,
)

_ALLOCATION: dict[str, Any] = {
    "ID": "8c3d9a1f-0000-4b4b-d185-0e1992ed43e9",
    "Namespace": "default",
    "Name": "web.frontend[0]",
    "JobID": "web",
    "TaskGroup": "frontend",
    "ClientStatus": "running",
    "DesiredStatus": "run",
    "CreateIndex": 12,
    "ModifyTime": 1700000000000000000,
    "PreemptedAllocations": None,
    "DeploymentStatus": None,
    "DesiredTransition": {"Migrate": None, "Reschedule": True},
    "TaskStates": {
        "web": {
            "State": "running",
            "Failed": False,
            "Restarts": 2,
            "StartedAt": "2024-01-02T03:04:05Z",
            "Events": [
                {"Type": "Received", "ExitCode": 0, "Details": {}},
                {"Type": "Started", "ExitCode": 0, "Details": {"note": "ok"}},
            ],
        },
        "sidecar": {"State": "dead", "Failed": True, "Restarts": 0, "Events": None},
    },
    "Metrics": {"NodesEvaluated": 3, "Scores": {"node-a": 0.75}, "AllocationTime": 1500},
    "Job": {
        "ID": "web",
        "Type": "service",
        "Priority": 50,
        "Stop": False,
        "Version": 4,
        "Datacenters": ["dc1", "dc2"],
        "Meta": {"owner": "team-a", "my key": "spaced"},
        "TaskGroups": [
            {
                "Name": "frontend",
                "Count": 1,
                "Meta": None,
                "Tasks": [
                    {
                        "Name": "web",
                        "Driver": "docker",
                        "Env": {"PORT": "8080"},
                        "Config": {"image": "nginx:1.25", "args": ["-g", "daemon off;"]},
                    }
                ],
            }
        ],
    },
}


def alloc(**overrides: Any) -> dict[str, Any]:
    """A fresh copy of the sample allocation, with top-level fields replaced."""
    datum = copy.deepcopy(_ALLOCATION)
    datum.update(overrides)
    return datum


def matches(expression: str, datum: dict[str, Any] | None = None) -> bool:
    return compile_filter(expression).matches(alloc() if datum is None else datum)


def syntax_error(expression: str) -> FilterSyntaxError:
    with pytest.raises(FilterSyntaxError) as caught:
        compile_filter(expression)
    return caught.value


def evaluation_error(expression: str, datum: dict[str, Any] | None = None) -> str:
    compiled = compile_filter(expression)
    with pytest.raises(FilterEvaluationError) as caught:
        compiled.matches(alloc() if datum is None else datum)
    return str(caught.value)


# ---- public API ----------------------------------------------------------------------------


def test_errors_are_value_errors_with_a_common_base() -> None:
    assert issubclass(FilterSyntaxError, FilterError)
    assert issubclass(FilterEvaluationError, FilterError)
    assert issubclass(FilterError, ValueError)


def test_compiled_filter_keeps_its_expression() -> None:
    compiled = compile_filter("ClientStatus == running")
    assert isinstance(compiled, Filter)
    assert compiled.expression == "ClientStatus == running"
    assert repr(compiled) == "Filter('ClientStatus == running')"


def test_a_compiled_filter_is_reusable_across_data() -> None:
    compiled = compile_filter("ClientStatus == running")
    results = [compiled.matches(alloc(ClientStatus=status)) for status in ("running", "failed")]
    assert results == [True, False]


def test_syntax_error_reports_position_of_first_error() -> None:
    error = syntax_error("foo == 1\n  bar")
    assert (error.line, error.column, error.offset) == (2, 3, 11)


# ---- syntax errors -------------------------------------------------------------------------

_WS = "[ \\t\\r\\n]"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # go-bexpr vectors
        ('foo == "12x', '1:12 (11): rule "string": Unterminated string literal'),
        ("foo == `12x", '1:12 (11): rule "string": Unterminated string literal'),
        ("foo == 3x", '1:9 (8): rule "number": Invalid number literal'),
        ("foo[3] == abc", '1:5 (4): rule "index": Invalid index'),
        ('x in foo["abc"', '1:15 (14): rule "index": Unclosed index expression'),
        ('foo["abc" == 3', '1:11 (10): rule "index": Unclosed index expression'),
        ("x in 32", '1:6 (5): rule "match": Invalid selector'),
        ("32 == 32", f'1:4 (3): no match found, expected: "in", "not" or {_WS}'),
        ("32 is empty", f'1:4 (3): no match found, expected: "in", "not" or {_WS}'),
        ("x in foo abc", f'1:10 (9): no match found, expected: "and", "or", {_WS} or EOF'),
        (
            "x in foo and ",
            '1:14 (13): no match found, expected: "(", "-", "0", "\\"", "`", "not", '
            f"{_WS}, [1-9] or [a-zA-Z]",
        ),
        (
            "x in foo or not ",
            '1:17 (16): no match found, expected: "!=", "(", "-", "0", "==", "\\"", "`", '
            f'"contains", "in", "is", "matches", "not", {_WS}, [1-9] or [a-zA-Z]',
        ),
        ("(foo == 4", '1:10 (9): rule "grouping": Unmatched parentheses'),
        (
            '"/hy-phen/under_score/pi|pe/do.t/ti~lde/" == 3',
            f'1:43 (42): no match found, expected: "in", "not" or {_WS}',
        ),
        # the reference's worked example for Nomad's `filter=NotValid`
        (
            "NotValid",
            f'1:9 (8): no match found, expected: "!=", ".", "==", "[", {_WS} or [a-zA-Z0-9_/]',
        ),
    ],
)
def test_syntax_errors_match_go_bexpr(expression: str, message: str) -> None:
    assert str(syntax_error(expression)) == message


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # after `or` a collection may start, so `all` and `any` are expected too
        (
            "x in foo or ",
            '1:13 (12): no match found, expected: "(", "-", "0", "\\"", "`", "all", "any", '
            f'"not", {_WS}, [1-9] or [a-zA-Z]',
        ),
        (
            "",
            '1:1 (0): no match found, expected: "(", "-", "0", "\\"", "`", "all", "any", '
            f'"not", {_WS}, [1-9] or [a-zA-Z]',
        ),
        ("foo == 1\n  bar", f'2:3 (11): no match found, expected: "and", "or", {_WS} or EOF'),
        ("a == 1)", f'1:7 (6): no match found, expected: ".", {_WS}, [0-9] or EOF'),
        ("foo.", "1:5 (4): no match found, expected: [0-9] or [a-zA-Z]"),
        (
            "foo ==",
            f'1:7 (6): no match found, expected: "-", "0", "\\"", "`", {_WS}, [1-9] or [a-zA-Z]',
        ),
        ("x is", f"1:5 (4): no match found, expected: {_WS}"),
        (
            "x AND y",
            '1:3 (2): no match found, expected: "!=", "==", "contains", "in", "is", '
            f'"matches", "not" or {_WS}',
        ),
        ("(a == 1) and (b == 2", '1:21 (20): rule "grouping": Unmatched parentheses'),
        ("Name == 01", '1:10 (9): rule "number": Invalid number literal'),
        # the offset counts UTF-8 bytes, the column counts characters
        ('Name == "é', '1:11 (11): rule "string": Unterminated string literal'),
        # Go's strconv.Unquote refuses the literal, reported at its opening quote
        ('Name == "a\\q"', '1:9 (8): rule "string": invalid syntax'),
        ('Name == "a\\"b"', '1:9 (8): rule "string": invalid syntax'),
        ('Name == "a\\\'b"', '1:9 (8): rule "string": invalid syntax'),
        ('Name == "\\ud800"', '1:9 (8): rule "string": invalid syntax'),
        ('Name == "\\400"', '1:9 (8): rule "string": invalid syntax'),
        # several custom errors are joined with newlines, in the order they were found
        (
            'foo["',
            '1:6 (5): rule "string": Unterminated string literal\n'
            '1:5 (4): rule "index": Invalid index',
        ),
        # a number must be followed by whitespace, `)` or the end, so `{v == 1}` fails
        ("any Job.Datacenters as v {v == 1}", '1:33 (32): rule "number": Invalid number literal'),
    ],
)
def test_syntax_errors_follow_the_grammar(expression: str, message: str) -> None:
    assert str(syntax_error(expression)) == message


def test_a_newline_sits_at_column_zero_of_the_next_line() -> None:
    # pigeon moves to the next line when it reads the newline itself
    assert str(syntax_error("foo.\n")) == ("2:0 (4): no match found, expected: [0-9] or [a-zA-Z]")
    error = syntax_error("a ==\n")
    assert (error.line, error.column, error.offset) == (2, 1, 5)


@pytest.mark.parametrize(
    "expression",
    [
        "x == 1 and any TaskStates as k { k == web }",  # a collection only at the `or` level
        "Namecontains web",  # word operators need whitespace on both sides
        "Name is  emptyx",
        "ClientStatus == running AND JobID == web",  # keywords are lowercase
        "NOT ClientStatus == running",
        "_x == 1",  # identifiers start with a letter
        "1x == 1",
        'a.b."c" == 1',
        '"/a b" == 1',  # pointer segments take no spaces
        "a[b] == 1",
        "any TaskStates as k, { k == web }",
        "ClientStatus == running or",
        "not",
    ],
)
def test_invalid_expressions_are_refused(expression: str) -> None:
    syntax_error(expression)


def test_nesting_deeper_than_the_limit_is_a_syntax_error() -> None:
    depth = MAX_NESTING + 1
    error = syntax_error("(" * depth + "ClientStatus == running" + ")" * depth)
    assert "nests deeper than" in str(error)
    assert error.line == 1


def test_nesting_up_to_the_limit_parses_and_evaluates() -> None:
    depth = MAX_NESTING - 1
    expression = "not (" * depth + "ClientStatus == running" + ")" * depth
    assert matches(expression) is (depth % 2 == 0)


def test_long_flat_chains_do_not_recurse() -> None:
    expression = " or ".join(f'ID == "id-{number}"' for number in range(3000))
    assert matches(expression + " or JobID == web") is True
    assert matches(" and ".join(["JobID == web"] * 3000)) is True


def test_unclosed_parentheses_do_not_explode() -> None:
    error = syntax_error("(" * 60 + "a == 1")
    assert "Unmatched parentheses" in str(error)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_any_text_either_compiles_or_raises_a_syntax_error(expression: str) -> None:
    try:
        compile_filter(expression)
    except FilterSyntaxError as error:
        assert error.line >= 1 and error.column >= 0 and error.offset >= 0
        assert str(error)


_TOKENS = [
    "ClientStatus",
    "TaskStates.web.State",
    "Job.Meta",
    'Job.Meta["my key"]',
    '"/TaskStates/web/State"',
    "CreateIndex",
    "PreemptedAllocations",
    "Job.TaskGroups.0.Name",
    "k",
    "v",
    "==",
    "!=",
    "in",
    "not",
    "contains",
    "is",
    "empty",
    "nil",
    "matches",
    "and",
    "or",
    "(",
    ")",
    "{",
    "}",
    "any",
    "all",
    "as",
    ",",
    "_",
    "running",
    "12",
    "-1.5",
    '"x"',
    '"\\d+"',
    "`.*`",
    "[",
    "]",
    '"',
    "`",
    ".",
    "3x",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=14), st.sampled_from([" ", "", "\n"]))
def test_token_soup_compiles_and_evaluates_or_fails_cleanly(
    tokens: list[str], separator: str
) -> None:
    try:
        compiled = compile_filter(separator.join(tokens))
    except FilterSyntaxError:
        return
    try:
        result = compiled.matches(alloc())
    except FilterEvaluationError:
        return
    assert isinstance(result, bool)


# ---- literal forms -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "name"),
    [
        ("web", "web"),  # a bare word is a string
        ('"web"', "web"),
        ("`web`", "web"),
        ('"tab\\there"', "tab\there"),
        ('"\\u00e9t\\u00e9"', "été"),
        ('"\\x41\\102"', "AB"),
        ('"\\xc3\\xa9"', "é"),  # byte escapes combine into UTF-8
        ("`back\\slash`", "back\\slash"),  # raw strings keep backslashes
        ("`a\r\nb`", "a\nb"),  # and lose carriage returns
        ("true", "true"),  # booleans are words
        ("12", "12"),
        ("-0.5", "-0.5"),
        ('a["b"]', "a.b"),  # a selector used as a value joins its path with dots
        ('"/a/b"', "a/b"),  # a JSON pointer used as a value loses its leading slash
        ('"/a b"', "/a b"),  # not a pointer (space), so a plain string
        ('""', ""),
    ],
)
def test_literal_forms_compare_by_their_raw_text(literal: str, name: str) -> None:
    assert matches(f"Name == {literal}", alloc(Name=name)) is True
    assert matches(f"Name == {literal}", alloc(Name=name + "-other")) is False


def test_numbers_with_fractions_and_signs_parse() -> None:
    datum = alloc(Metrics={"Score": -0.25})
    assert matches("Metrics.Score == -0.25", datum) is True
    assert matches("Metrics.Score == 0.25", datum) is False


# ---- selector forms ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "selector",
    [
        "TaskStates.web.State",
        'TaskStates["web"].State',
        "TaskStates[`web`].State",
        'TaskStates[ "web" ]["State"]',
        '"/TaskStates/web/State"',
    ],
)
def test_selector_forms_reach_the_same_value(selector: str) -> None:
    assert matches(f"{selector} == running") is True


@pytest.mark.parametrize(
    "selector",
    [
        "Job.TaskGroups.0.Tasks.0.Driver",
        'Job.TaskGroups["0"].Tasks["0"].Driver',
        '"/Job/TaskGroups/0/Tasks/0/Driver"',
    ],
)
def test_list_elements_are_selected_by_index(selector: str) -> None:
    assert matches(f"{selector} == docker") is True


def test_index_selectors_take_keys_that_are_not_identifiers() -> None:
    assert matches('Job.Meta["my key"] == spaced') is True


def test_json_pointer_unescapes_tilde_sequences() -> None:
    datum = alloc(Job={"Meta": {"a/b": "slash", "c~d": "tilde"}})
    assert matches('"/Job/Meta/a~1b" == slash', datum) is True
    assert matches('"/Job/Meta/c~0d" == tilde', datum) is True


def test_json_pointer_segments_take_unicode_letters() -> None:
    datum = alloc(Job={"Meta": {"ключ": "значение"}})
    assert matches('"/Job/Meta/ключ" == `значение`', datum) is True


def test_identifiers_may_contain_slashes_and_underscores() -> None:
    datum = alloc(Job={"Meta": {"a/b_c": "yes"}})
    assert matches("Job.Meta.a/b_c == yes", datum) is True


def test_whitespace_around_operators_is_free() -> None:
    assert matches("\t\r\n ( \t\r\n ClientStatus \t\r\n == \t\r\n running \t\r\n ) \t\r\n")
    assert matches("ClientStatus==running") is True
    assert matches("ClientStatus!=running") is False


# ---- operators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("ClientStatus == running", True),
        ("ClientStatus == failed", False),
        ("ClientStatus != running", False),
        ("ClientStatus != failed", True),
        ("dc2 in Job.Datacenters", True),
        ("dc9 in Job.Datacenters", False),
        ("dc2 not in Job.Datacenters", False),
        ("dc9 not in Job.Datacenters", True),
        ("Job.Datacenters contains dc1", True),
        ("Job.Datacenters contains dc9", False),
        ("Job.Datacenters not contains dc1", False),
        ("Job.Datacenters not contains dc9", True),
        ("owner in Job.Meta", True),  # on a map, `in` looks at the keys
        ('"team-a" in Job.Meta', False),
        ("unn in ClientStatus", True),  # on a string, it is a substring test
        ("ClientStatus contains xyz", False),
        ("PreemptedAllocations is empty", True),
        ("Job.Datacenters is empty", False),
        ("Job.Datacenters is not empty", True),
        ("Job.Meta is not empty", True),
        ("Namespace is empty", False),
        ("DeploymentStatus is nil", True),
        ("DeploymentStatus is not nil", False),
        ("Job is nil", False),
        ("Job.TaskGroups.0.Meta is nil", True),
        ("Job.Datacenters is nil", False),
        ("ClientStatus matches `^run`", True),
        ("ClientStatus matches `^fail`", False),
        ("ClientStatus not matches `^run`", False),
        ("ClientStatus not matches `^fail`", True),
        ("JobID matches eb", True),  # unanchored
    ],
)
def test_operators(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_is_empty_on_an_empty_string_and_map() -> None:
    datum = alloc(ClientDescription="", Job={"Meta": {}})
    assert matches("ClientDescription is empty", datum) is True
    assert matches("Job.Meta is empty", datum) is True


def test_pointer_fields_answer_is_nil_with_and_without_a_value() -> None:
    assert matches("DesiredTransition.Migrate is nil") is True
    assert matches("DesiredTransition.Reschedule is nil") is False
    assert matches("DesiredTransition.Reschedule is not nil") is True


# ---- precedence ----------------------------------------------------------------------------

_FLAGS: dict[str, Any] = {"A": True, "B": False, "C": False}


def flags(**values: bool) -> dict[str, Any]:
    return alloc(Flags={**_FLAGS, **values})


def test_and_binds_tighter_than_or() -> None:
    # a or (b and c) is true; (a or b) and c would be false
    assert matches("Flags.A == true or Flags.B == true and Flags.C == true", flags()) is True
    assert matches("Flags.B == true and Flags.C == true or Flags.A == true", flags()) is True


def test_not_binds_tighter_than_and() -> None:
    datum = flags(A=False, B=False)
    # (not a) and b is false; not (a and b) would be true
    assert matches("not Flags.A == true and Flags.B == true", datum) is False


def test_not_binds_tighter_than_or() -> None:
    datum = flags(A=True, B=True)
    # (not a) or b is true; not (a or b) would be false
    assert matches("not Flags.A == true or Flags.B == true", datum) is True


def test_parentheses_override_precedence() -> None:
    datum = flags()
    assert matches("(Flags.A == true or Flags.B == true) and Flags.C == true", datum) is False
    assert matches("not (Flags.A == false and Flags.B == false)", flags(A=False)) is False


def test_double_not_cancels_out() -> None:
    assert matches("not not ClientStatus == running") is True
    assert matches("not not not ClientStatus == running") is False


def test_not_can_be_a_selector_name() -> None:
    assert matches("not == yes", alloc(**{"not": "yes"})) is True
    assert matches("not not == yes", alloc(**{"not": "yes"})) is False


def test_and_stops_at_the_first_false_operand() -> None:
    assert matches("ClientStatus == failed and InvalidField == 1") is False


def test_or_stops_at_the_first_true_operand() -> None:
    assert matches("ClientStatus == running or InvalidField == 1") is True


def test_errors_are_not_swallowed_by_or() -> None:
    assert "InvalidField" in evaluation_error("InvalidField == 1 or ClientStatus == running")


def test_outer_parentheses_around_the_whole_expression() -> None:
    assert matches("(ClientStatus == running)") is True
    assert matches("(ClientStatus == failed) or (JobID == web)") is True


# ---- conversions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("Job.Priority == 50", True),
        ('Job.Priority == "50"', True),  # the form of the literal does not matter
        ("Job.Priority == `0x32`", True),  # ParseInt base 0: hex, octal, binary, underscores
        ("Job.Priority == `0o62`", True),
        ("Job.Priority == `062`", True),
        ("Job.Priority == `0b110010`", True),
        ("Job.Priority == `5_0`", True),
        ("Job.Priority == `+50`", True),
        ("Job.Priority == 51", False),
        ("CreateIndex == 12", True),
        ("Metrics.Scores[`node-a`] == 0.75", True),
        ("Metrics.Scores[`node-a`] == `75e-2`", True),
        ("Metrics.Scores[`node-a`] == 1", False),
        ("TaskStates.web.Failed == false", True),
        ("TaskStates.web.Failed == F", True),
        ("TaskStates.web.Failed == 0", True),
        ("TaskStates.sidecar.Failed == TRUE", True),
        ("TaskStates.sidecar.Failed != true", False),
        ("JobID == 5", False),
    ],
)
def test_literals_convert_to_the_kind_of_the_field(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_a_number_literal_against_a_string_field_compares_text() -> None:
    assert matches("JobID == 5", alloc(JobID="5")) is True
    assert matches("JobID == 5", alloc(JobID="5.0")) is False


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "Job.Priority == abc",
            'error getting match value in expression: strconv.ParseInt: parsing "abc": '
            "invalid syntax",
        ),
        (
            "Job.Priority == 1.5",
            'error getting match value in expression: strconv.ParseInt: parsing "1.5": '
            "invalid syntax",
        ),
        (
            'Job.Priority != "9223372036854775808"',
            "error getting match value in expression: strconv.ParseInt: "
            'parsing "9223372036854775808": value out of range',
        ),
        (
            "CreateIndex == -1",  # unsigned fields use ParseUint, which takes no sign
            'error getting match value in expression: strconv.ParseUint: parsing "-1": '
            "invalid syntax",
        ),
        (
            "TaskStates.web.Failed == yes",
            'error getting match value in expression: strconv.ParseBool: parsing "yes": '
            "invalid syntax",
        ),
        (
            'Metrics.Scores[`node-a`] == "1e400"',
            'error getting match value in expression: strconv.ParseFloat: parsing "1e400": '
            "value out of range",
        ),
        (
            'Metrics.Scores[`node-a`] == " 1"',
            'error getting match value in expression: strconv.ParseFloat: parsing " 1": '
            "invalid syntax",
        ),
        ("Job.Priority == `5__0`", 'strconv.ParseInt: parsing "5__0": invalid syntax'),
    ],
)
def test_conversion_failures_are_evaluation_errors(expression: str, message: str) -> None:
    assert evaluation_error(expression).endswith(message)


def test_not_equal_is_not_negated_on_a_conversion_error() -> None:
    with pytest.raises(FilterEvaluationError):
        compile_filter("Job.Priority != abc").matches(alloc())


def test_conversion_errors_wait_for_evaluation() -> None:
    compiled = compile_filter("Job.Priority == abc")  # compiles fine
    assert compiled.matches(alloc(Job={"Priority": "abc"})) is True


def test_float_literals_accept_go_forms() -> None:
    datum = alloc(Metrics={"Scores": {"n": 1.5}})
    assert matches("Metrics.Scores.n == `0x1.8p0`", datum) is True
    assert matches("Metrics.Scores.n == `1_5e-1_0`", datum) is False
    assert matches('Metrics.Scores.n != "+inf"', datum) is True
    assert "ParseFloat" in evaluation_error("Metrics.Scores.n == `0x1.8`", datum)
    assert "ParseFloat" in evaluation_error("Metrics.Scores.n == `+nan`", datum)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "DeploymentStatus == x",
            "unable to find suitable primitive comparison function for matching",
        ),
        ("Job == x", "unable to find suitable primitive comparison function for matching"),
        (
            "Job.Datacenters == dc1",
            "unable to find suitable primitive comparison function for matching",
        ),
        (
            "Job.TaskGroups.0.Meta != x",
            "unable to find suitable primitive comparison function for matching",
        ),
    ],
)
def test_equality_needs_a_primitive(expression: str, message: str) -> None:
    assert evaluation_error(expression) == message


# ---- resolving selectors: structs, maps, lists ---------------------------------------------


def test_unknown_top_level_field_is_an_error() -> None:
    assert evaluation_error("InvalidField == 1") == (
        "error finding value in datum: /InvalidField at part 0: "
        'couldn\'t find key: struct field with name "InvalidField"'
    )


def test_unknown_nested_struct_field_is_an_error() -> None:
    assert evaluation_error("TaskStates.web.Nope == 1") == (
        "error finding value in datum: /TaskStates/web/Nope at part 2: "
        'couldn\'t find key: struct field with name "Nope"'
    )


@pytest.mark.parametrize(
    ("operator", "expected"),
    [
        ("== x", False),
        ("!= x", True),
        ("contains x", False),
        ("not contains x", True),
        ("is empty", True),
        ("is not empty", False),
        ("is nil", True),
        ("is not nil", False),
        ("matches x", False),
        ("not matches x", True),
    ],
)
def test_a_missing_map_key_gives_the_not_present_answer(operator: str, expected: bool) -> None:
    assert matches(f"Job.Meta.absent {operator}") is expected
    assert matches(f"Job.TaskGroups.0.Meta.absent {operator}") is expected  # a nil map too


@pytest.mark.parametrize(("operator", "expected"), [("in", False), ("not in", True)])
def test_value_first_operators_on_a_missing_map_key(operator: str, expected: bool) -> None:
    assert matches(f"x {operator} Job.Meta.absent") is expected


def test_a_missing_map_key_before_the_leaf_is_an_error() -> None:
    assert evaluation_error("TaskStates.nope.State == running") == (
        'error finding value in datum: /TaskStates/nope/State at part 1: couldn\'t find key "nope"'
    )


def test_walking_through_a_string_is_an_error() -> None:
    assert evaluation_error("ClientStatus.x == 1") == (
        "error finding value in datum: /ClientStatus/x: at part 1, invalid value kind: string"
    )


def test_walking_through_a_nil_pointer_is_an_error() -> None:
    assert evaluation_error("DeploymentStatus.Healthy == true") == (
        "error finding value in datum: /DeploymentStatus/Healthy: at part 1, "
        "invalid value kind: invalid"
    )


def test_walking_through_numbers_reports_their_kind() -> None:
    assert evaluation_error("CreateIndex.x == 1").endswith("invalid value kind: uint64")
    assert evaluation_error("Job.Priority.x == 1").endswith("invalid value kind: int")
    assert evaluation_error("Job.Stop.x == 1").endswith("invalid value kind: bool")


def test_list_index_out_of_range() -> None:
    assert evaluation_error("Job.TaskGroups.3.Name == x") == (
        "error finding value in datum: /Job/TaskGroups/3/Name at part 2: "
        "index 3 is out of range (length = 1)"
    )


def test_nil_list_index_is_out_of_range() -> None:
    assert evaluation_error("PreemptedAllocations.0 == x") == (
        "error finding value in datum: /PreemptedAllocations/0 at part 1: "
        "index 0 is out of range (length = 0)"
    )


def test_list_index_must_be_an_integer() -> None:
    assert evaluation_error("Job.TaskGroups.frontend.Name == x") == (
        "error finding value in datum: /Job/TaskGroups/frontend/Name at part 2: "
        'couldn\'t convert value "frontend" to type int'
    )


def test_error_pointers_escape_slashes_and_tildes() -> None:
    message = evaluation_error('Job.Meta["a/b"].x == 1')
    assert message.startswith("error finding value in datum: /Job/Meta/a~1b/x at part 2:")


def test_a_shape_can_make_every_dict_a_map() -> None:
    shape = DatumShape(maps=frozenset({"**"}))
    compiled = compile_filter("a.missing == x", shape=shape)
    assert compiled.matches({"a": {}}) is False
    top = compile_filter("missing == x", shape=shape)
    with pytest.raises(FilterEvaluationError) as caught:
        top.matches({"a": {}})
    assert str(caught.value) == (
        'error finding value in datum: /missing at part 0: couldn\'t find key "missing"'
    )


def test_an_empty_shape_makes_every_dict_a_struct() -> None:
    compiled = compile_filter("Job.Meta.absent == x", shape=DatumShape())
    with pytest.raises(FilterEvaluationError, match='struct field with name "absent"'):
        compiled.matches(alloc())


def test_nomad_shape_knows_the_task_config_subtree_is_maps() -> None:
    assert NOMAD_ALLOCATION_SHAPE.maps >= {"TaskStates", "Job.Meta"}
    assert matches("Job.TaskGroups.0.Tasks.0.Config.absent == x") is False
    datum = alloc()
    datum["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["nested"] = {"a": 1}
    assert matches("Job.TaskGroups.0.Tasks.0.Config.nested.b == 1", datum) is False


def test_shape_patterns_reject_inner_double_star() -> None:
    with pytest.raises(ValueError, match="must end"):
        compile_filter("a == 1", shape=DatumShape(maps=frozenset({"a.**.b"})))


# ---- `in` and `contains` -------------------------------------------------------------------


def test_in_on_an_int_list_converts_the_literal() -> None:
    datum = alloc(Ports=[80, 443])
    assert matches("443 in Ports", datum) is True
    assert matches("`0x50` in Ports", datum) is True
    assert evaluation_error("http in Ports", datum) == (
        'error getting match value in expression: strconv.ParseInt: parsing "http": invalid syntax'
    )


def test_in_on_a_mixed_list_skips_elements_it_cannot_convert() -> None:
    datum = alloc(Mixed=["a", 7, True])
    assert matches("7 in Mixed", datum) is True
    assert matches("a in Mixed", datum) is True
    assert matches("true in Mixed", datum) is True
    assert matches("zzz in Mixed", datum) is False


def test_in_on_a_mixed_list_fails_on_range_errors() -> None:
    datum = alloc(Mixed=["a", 7])
    assert evaluation_error('"99999999999999999999" in Mixed', datum) == (
        "error getting interface slice match value in expression"
    )


def test_in_on_a_list_of_objects_is_an_error() -> None:
    assert evaluation_error("x in Job.TaskGroups") == (
        'unable to find suitable primitive comparison function for "in" comparison'
    )
    assert evaluation_error("x in Mixed", alloc(Mixed=["a", {"b": 1}])) == (
        'unable to find suitable primitive comparison function for "in" comparison '
        "in interface slice: struct"
    )


def test_in_on_an_empty_list_is_false() -> None:
    assert matches("x in Job.Datacenters", alloc(Job={"Datacenters": []})) is False


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x in Job", 'cannot perform in/contains operations on type struct for selector: "Job"'),
        (
            "12 in CreateIndex",
            'cannot perform in/contains operations on type uint64 for selector: "CreateIndex"',
        ),
        (
            "DeploymentStatus contains x",
            "cannot perform in/contains operations on type invalid for selector: "
            '"DeploymentStatus"',
        ),
        (
            "x in CreateIndex",  # the literal is converted first
            'error getting match value in expression: strconv.ParseUint: parsing "x": '
            "invalid syntax",
        ),
    ],
)
def test_in_needs_a_container(expression: str, message: str) -> None:
    assert evaluation_error(expression) == message


# ---- `is empty` and `is nil` errors --------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("Job is empty", 'cannot perform is-empty operations on type struct for selector: "Job"'),
        (
            "Job.Priority is not empty",
            'cannot perform is-empty operations on type int for selector: "Job.Priority"',
        ),
        (
            "ClientStatus is nil",
            'cannot perform is-nil operations on type string for selector: "ClientStatus"',
        ),
        (
            '"/CreateIndex" is not nil',
            'cannot perform is-nil operations on type uint64 for selector: "CreateIndex"',
        ),
    ],
)
def test_emptiness_and_nil_need_suitable_kinds(expression: str, message: str) -> None:
    assert evaluation_error(expression) == message


def test_nil_counts_as_empty() -> None:
    assert matches("DeploymentStatus is empty") is True


# ---- `matches` -----------------------------------------------------------------------------


def test_matches_needs_a_string() -> None:
    assert evaluation_error("CreateIndex matches 1") == (
        "value of type uint64 is not convertible to []byte"
    )


def test_a_bad_pattern_fails_at_evaluation_with_go_wording() -> None:
    compiled = compile_filter('ClientStatus matches "("')
    with pytest.raises(FilterEvaluationError) as caught:
        compiled.matches(alloc())
    assert str(caught.value) == (
        'failed to compile regular expression "(": error parsing regexp: missing closing ): `(`'
    )


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        (r"^web-\d+$", "web-12", True),
        (r"^web-\d+$", "web-12\n", False),  # `$` is the end of the text
        (r"^web-\d+$", "web-١٢", False),  # `\d` is ASCII only
        (r"(?m)^b$", "a\nb\nc", True),
        (r"(?i)WEB", "web", True),
        (r"a(?i)b|c", "aB", True),  # flags may appear mid-pattern and last to the group's end
        (r"a(?i)b|c", "C", True),
        (r"a(?i)b|c", "Ab", False),
        (r"\bfoo\b", "a foo b", True),
        (r"\bfoo\b", "afoo", False),
        (r"x{,2}", "x{,2}", True),  # not a Go repeat, so literal
        (r"[[:alpha:]]+\.", "abc.", True),
        (r"\Qa.b\E", "axb", False),
        (r"\x{41}\x42\101", "ABA", True),
        (r"(?P<n>a)(?<m>b)", "ab", True),
        (r"(?s).", "\n", True),
        (r".", "\n", False),
        (r"[\d\s]", "x", False),
    ],
)
def test_regular_expressions_follow_re2(pattern: str, subject: str, expected: bool) -> None:
    assert matches(f"Name matches `{pattern}`", alloc(Name=subject)) is expected


@pytest.mark.parametrize(
    ("pattern", "go_error"),
    [
        ("a**", "invalid nested repetition operator: `**`"),
        ("*a", "missing argument to repetition operator: `*`"),
        ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
        (r"(a)\1", r"invalid escape sequence: `\1`"),
        (r"a\Z", r"invalid escape sequence: `\Z`"),
        ("[z-a]", "invalid character class range: `z-a`"),
        ("[abc", "missing closing ]: `[abc`"),
        ("a)", "unexpected ): `a)`"),
        ("a{1001}", "invalid repeat count: `{1001}`"),
        ("\\", "trailing backslash at end of expression: ``"),
        (r"\pL", r"Unicode classes are not supported by allocbridge: `\pL`"),
    ],
)
def test_patterns_go_refuses_are_refused(pattern: str, go_error: str) -> None:
    message = evaluation_error(f"Name matches `{pattern}`")
    assert message.endswith(f"error parsing regexp: {go_error}")


# ---- collections ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("any TaskStates as _, v { v.State == dead }", True),
        ("all TaskStates as _, v { v.State == dead }", False),
        ("all TaskStates as _, v { v.State != pending }", True),
        ("any TaskStates as name { name == sidecar }", True),  # on a map the name is the key
        ("any TaskStates as name, _ { name == web }", True),
        ("any TaskStates as k, v { k == web and v.Restarts == 2 }", True),
        ("any Job.Datacenters as dc { dc == dc2 }", True),  # on a list it is the element
        ("all Job.Datacenters as dc { dc matches `^dc` }", True),
        ("any Job.Datacenters as i, dc { i == 1 and dc == dc2 }", True),
        ("any Job.Datacenters as i, _ { i == 5 }", False),
        ("any Job.TaskGroups as _, g { any g.Tasks as t { t.Env.PORT == 8080 } }", True),
        ("any TaskStates.web.Events as e { e.Details.note == ok }", True),
        ("all TaskStates.web.Events as e { e.Details.note == ok }", False),
        ("any PreemptedAllocations as p { p == x }", False),  # a nil list is empty
        ("all PreemptedAllocations as p { p == x }", True),
        ("any Job.Meta.absent as p { p == x }", False),  # a missing key is not present
        ("all Job.Meta.absent as p { p == x }", True),
        ("(any TaskStates as k { k == web }) and ClientStatus == running", True),
        ("ClientStatus == failed or any TaskStates as k { k == web }", True),
    ],
)
def test_collections(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_selectors_outside_the_bindings_read_the_whole_datum() -> None:
    assert matches("any TaskStates as k { k == web and ClientStatus == running }") is True


def test_an_inner_binding_shadows_an_outer_one() -> None:
    expression = "any TaskStates as k { any Job.Datacenters as k { k == dc1 } }"
    assert matches(expression) is True


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("any ClientStatus as x { x == 1 }", "ClientStatus is not a list or a map"),
        ("all Job as x { x == 1 }", "Job is not a list or a map"),
        (
            "any TaskStates as k, k { k == web }",
            '"k" cannot be used as a placeholder for both the index and the value',
        ),
        ("any TaskStates as k { k.State == x }", "/k references a string so /k/State is invalid"),
        ("any Job.Datacenters as i, _ { i.x == 1 }", "/i references a int so /i/x is invalid"),
        (
            "any TaskStates as _, v { v.Nope == 1 }",
            "error finding value in datum: /TaskStates/web/Nope at part 2: "
            'couldn\'t find key: struct field with name "Nope"',
        ),
    ],
)
def test_collection_errors(expression: str, message: str) -> None:
    assert evaluation_error(expression) == message


def test_duplicate_placeholders_only_fail_on_a_non_empty_collection() -> None:
    assert matches("any PreemptedAllocations as k, k { k == x }") is False
