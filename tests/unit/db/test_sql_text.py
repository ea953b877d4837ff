import pytest

from llm_bot.db.sql_text import positional, values


def test_named_placeholders_become_numbered_and_a_repeated_name_is_one_parameter() -> None:
    statement, names = positional(
        "SELECT %(a)s, x <=> %(vector)s::vector FROM t WHERE u = %(a)s AND v = %(b_2)s"
    )
    assert statement == "SELECT $1, x <=> $2::vector FROM t WHERE u = $1 AND v = $3"
    assert names == ("a", "vector", "b_2")
    assert values(names, {"b_2": 3, "a": 1, "vector": 2, "unused": 4}) == [1, 2, 3]


def test_a_statement_without_placeholders_is_unchanged() -> None:
    assert positional("SELECT 1 -- a comment\n") == ("SELECT 1 -- a comment\n", ())


@pytest.mark.parametrize("sql", ["SELECT 100 % 7", "SELECT %s", "SELECT %(open"])
def test_any_other_percent_is_refused(sql: str) -> None:
    with pytest.raises(ValueError, match="no %\\(name\\)s placeholder"):
        positional(sql)
