import pytest

from tickwarden.recipes import RecipeError, parse_recipe


def step(name, *deps, **extra):
    return {"name": name, "kind": "python", "call": "pkg.mod:fn", "depends_on": list(deps), **extra}


def test_it_orders_steps_after_their_dependencies_keeping_file_order_for_ties():
    recipe = parse_recipe({"steps": [step("report", "join"), step("b"), step("join", "a", "b"), step("a")]})
    assert recipe.names == ["b", "a", "join", "report"]


@pytest.mark.parametrize(
    "raw, message",
    [
        ({}, "no list of steps"),
        ({"steps": []}, "no steps"),
        ({"steps": [step("a", "b"), step("b", "a")]}, "cycle"),
        ({"steps": [step("a", "zzz")]}, "unknown step 'zzz'"),
        ({"steps": [step("a"), step("a")]}, "declared twice"),
        ({"steps": [{"name": "a", "kind": "shell"}]}, "unknown kind"),
        ({"steps": [{"name": "a", "kind": "python", "call": "not a call"}]}, "package.module:function"),
        ({"steps": [{"name": "q", "kind": "sql", "query": "SELECT 1", "database": "postgres://x"}]}, "secret:NAME"),
        ({"steps": [step("a", secrets=["env:X=1"])]}, "secret:NAME"),
        ({"steps": [step("a", timeout_seconds=0)]}, "positive integer"),
    ],
)
def test_it_refuses_a_recipe_it_cannot_execute(raw, message):
    with pytest.raises(RecipeError, match=message):
        parse_recipe(raw)
