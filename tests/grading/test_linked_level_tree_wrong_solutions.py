"""Each wrong solution to linked_level_tree loses exactly the tests of its mistake."""

from __future__ import annotations

import pytest

EMPTY = "test_an_empty_tree_gives_none"
SINGLE = "test_a_single_node_has_no_next"
PERFECT = "test_perfect_trees_link_every_level"
COMPLETE = "test_complete_trees_link_the_partial_last_level"
SPARSE = "test_sparse_trees_skip_the_gaps_on_every_level"
CHAINS = "test_left_only_and_right_only_chains_have_no_next"
ZIGZAG = "test_zigzag_trees_have_no_next"
RANDOM = "test_random_trees_match_a_breadth_first_oracle"
RETURNS_ROOT = "test_connect_returns_the_root_it_was_given"
IN_PLACE = "test_connect_links_the_given_nodes_in_place"
SPACE = "test_connect_uses_constant_extra_space"
DEEP = "test_a_chain_far_deeper_than_the_recursion_limit_is_linked"
ALL = {EMPTY, SINGLE, PERFECT, COMPLETE, SPARSE, CHAINS, ZIGZAG, RANDOM, RETURNS_ROOT,
       IN_PLACE, SPACE, DEEP}

# wrong solution -> (the tests it must lose, a phrase every one of those messages contains)
EXPECTED = {
    "level_order_queue": ({SPACE}, "grows with the tree"),
    "recursive": ({DEEP}, "RecursionError"),
    "perfect_only": ({COMPLETE, SPARSE, RANDOM}, ""),
    "returns_none": ({RETURNS_ROOT}, "should return the root"),
    # A copy is not the given root, leaves the given nodes unlinked, and takes O(n) space.
    "builds_new_nodes": ({RETURNS_ROOT, IN_PLACE, SPACE}, ""),
    # Spins when a parent's right-hand neighbour has no children: complete and gappy trees.
    "loops_forever": ({COMPLETE, SPARSE, RANDOM}, "time limit"),
    # Every level below the root becomes a ring; only trees of one level escape.
    "circular_levels": (ALL - {EMPTY, SINGLE, RETURNS_ROOT}, ""),
}
TIME_LIMIT_S = 5.0  # short, so the looping solution costs seconds; generous for a busy machine


@pytest.fixture(scope="module")
def reports(submit, solutions_dir):
    """The report of every wrong solution, graded two at a time."""
    jobs = {name: submit("linked_level_tree", solutions_dir / "linked_level_tree" / f"{name}.py",
                         time_limit_s=TIME_LIMIT_S) for name in EXPECTED}
    return {name: job.result() for name, job in jobs.items()}


@pytest.mark.parametrize("name", EXPECTED)
def test_a_wrong_solution_loses_exactly_its_tests(reports, name):
    report = reports[name]
    lost, phrase = EXPECTED[name]
    assert {test.name for test in report.tests if not test.passed} == lost
    assert {test.name for test in report.tests} == ALL
    max_points = {test.name: test.max_points for test in report.tests}
    assert report.score == report.max_score - sum(max_points[test] for test in lost)
    for test in report.tests:
        if not test.passed:
            assert phrase in test.message and test.message, test


def test_a_cycle_is_reported_as_a_cycle(reports):
    messages = [test.message for test in reports["circular_levels"].tests if not test.passed]
    assert sum("a cycle" in message for message in messages) >= 8
