"""Graded tests for the linked-level tree: each test checks one behaviour of `connect`.

The links are graded on the tree `connect` returns (or, if it returns None, on the tree it
was given), against a breadth-first oracle that walks `left`/`right` level by level. The
checker follows each level's `next` chain node by node and stops at the first wrong link, so
a cycle fails with a message instead of hanging. Trees are built iteratively, so a deep
chain costs no recursion in the tests themselves.
"""

from __future__ import annotations

import random
import sys
from collections import deque

import pytest
from node import Node

from refimpl.grading.measure import peak_bytes

# --- building trees ---------------------------------------------------------------------------


def from_level_order(values: list[int | None]) -> Node | None:
    """The tree written level by level, None marking a missing child (LeetCode's notation)."""
    if not values or values[0] is None:
        return None
    root = Node(values[0])
    parents = deque([root])
    items = iter(values[1:])
    while parents:
        parent = parents.popleft()
        for side in ("left", "right"):
            value = next(items, None)
            if value is not None:
                child = Node(value)
                setattr(parent, side, child)
                parents.append(child)
    return root


def heap_tree(num_nodes: int, keep=lambda position: True) -> Node | None:
    """Nodes at heap positions 1..num_nodes (children of p: 2p, 2p+1) that `keep` accepts."""
    nodes: dict[int, Node] = {}
    for position in range(1, num_nodes + 1):
        if position > 1 and (position // 2 not in nodes or not keep(position)):
            continue
        nodes[position] = node = Node(position)
        if position > 1:
            setattr(nodes[position // 2], "left" if position % 2 == 0 else "right", node)
    return nodes.get(1)


def perfect_tree(depth: int) -> Node:
    """All 2**depth - 1 nodes of a tree `depth` levels deep."""
    return heap_tree(2**depth - 1)


def path_tree(sides: list[str]) -> Node:
    """A chain of len(sides) + 1 nodes, each the `sides[i]` child of the one before."""
    root = tip = Node(0)
    for depth, side in enumerate(sides, start=1):
        child = Node(depth)
        setattr(tip, side, child)
        tip = child
    return root


def random_tree(rng: random.Random, num_nodes: int) -> Node | None:
    """A tree of `num_nodes` grown by hanging each new node on a random free child slot."""
    if num_nodes == 0:
        return None
    root = Node(0)
    free_slots = [(root, "left"), (root, "right")]
    for val in range(1, num_nodes):
        parent, side = free_slots.pop(rng.randrange(len(free_slots)))
        child = Node(val)
        setattr(parent, side, child)
        free_slots += [(child, "left"), (child, "right")]
    return root


# --- the oracle and the checker ---------------------------------------------------------------


def levels(root: Node | None, max_nodes: int) -> list[list[Node]]:
    """The nodes level by level, from `left`/`right` alone (breadth-first search)."""
    result: list[list[Node]] = []
    level = [root] if root is not None else []
    seen = 0
    while level:
        result.append(level)
        seen += len(level)
        assert seen <= max_nodes, "the tree's left/right links now reach more nodes than it had"
        level = [child for node in level for child in (node.left, node.right) if child]
    return result


def shape(root: Node | None, max_nodes: int) -> list[list[int]]:
    """The values level by level: what `connect` must leave unchanged."""
    return [[node.val for node in level] for level in levels(root, max_nodes)]


def check_links(given: Node | None, returned: Node | None, expected_shape: list[list[int]]) -> None:
    """Assert every level's `next` chain runs left to right and ends in None."""
    root = returned if returned is not None else given
    num_nodes = sum(map(len, expected_shape))
    actual = levels(root, num_nodes)
    assert [[node.val for node in level] for level in actual] == expected_shape, (
        "connect changed the tree's values or its left/right links"
    )
    for depth, level in enumerate(actual):
        earlier: set[int] = set()  # ids of the nodes left of the one being checked
        for node, want in zip(level, [*level[1:], None], strict=True):
            earlier.add(id(node))
            got = node.next
            if got is not want:
                cycle = " (itself or a node on its left: a cycle)" if id(got) in earlier else ""
                raise AssertionError(
                    f"level {depth}: {node!r}.next should be {want!r} but is {got!r}{cycle}"
                )


def connect_and_check(connect, root: Node | None) -> Node | None:
    """Run `connect` on `root` and check its links; returns what `connect` returned."""
    expected = shape(root, sys.maxsize)
    returned = connect(root)
    check_links(root, returned, expected)
    return returned


@pytest.fixture
def connect(solution):
    """The learner's `Solution().connect`."""
    return solution.Solution().connect


# --- the graded behaviours --------------------------------------------------------------------


@pytest.mark.points(1)
def test_an_empty_tree_gives_none(connect):
    """An empty tree (None) comes back as None."""
    assert connect(None) is None


@pytest.mark.points(1)
def test_a_single_node_has_no_next(connect):
    """A lone root keeps next = None."""
    root = Node(1)
    connect_and_check(connect, root)
    assert root.next is None


@pytest.mark.points(2)
def test_perfect_trees_link_every_level(connect):
    """Perfect trees of 2 to 10 levels: every level is linked left to right."""
    for depth in range(2, 11):
        connect_and_check(connect, perfect_tree(depth))


@pytest.mark.points(2)
def test_complete_trees_link_the_partial_last_level(connect):
    """Complete trees of 2 to 64 nodes (last level filled from the left) are linked."""
    for num_nodes in range(2, 65):
        connect_and_check(connect, heap_tree(num_nodes))


@pytest.mark.points(3)
def test_sparse_trees_skip_the_gaps_on_every_level(connect):
    """Trees with missing children on every level link across the gaps."""
    connect_and_check(connect, from_level_order([1, 2, 3, 4, 5, None, 7]))
    connect_and_check(connect, from_level_order([1, 2, 3, 4, None, None, 5, 6, None, None, 7]))
    connect_and_check(connect, from_level_order([1, 2, 3, 4, 5, None, None, 6, None, None, 7]))
    for modulus in (3, 5, 7):  # drop every heap position divisible by a small number
        connect_and_check(connect, heap_tree(500, keep=lambda p, m=modulus: p % m != 0))


@pytest.mark.points(1)
def test_left_only_and_right_only_chains_have_no_next(connect):
    """Chains of only left (or only right) children leave every next as None."""
    for side in ("left", "right"):
        connect_and_check(connect, path_tree([side] * 50))


@pytest.mark.points(1)
def test_zigzag_trees_have_no_next(connect):
    """Chains that alternate left and right children leave every next as None."""
    connect_and_check(connect, path_tree(["left", "right"] * 25))
    connect_and_check(connect, path_tree(["right", "left"] * 25))


@pytest.mark.points(3)
def test_random_trees_match_a_breadth_first_oracle(connect):
    """300 random trees of 0 to 80 nodes match a level-order (BFS) oracle."""
    rng = random.Random(117)
    for _ in range(300):
        connect_and_check(connect, random_tree(rng, rng.randrange(81)))


@pytest.mark.points(1)
def test_connect_returns_the_root_it_was_given(connect):
    """connect returns the very root node it was given."""
    root = perfect_tree(3)
    assert connect(root) is root, "connect should return the root it was given"


@pytest.mark.points(2)
def test_connect_links_the_given_nodes_in_place(connect):
    """connect links the nodes it was given (no copies) and leaves val/left/right alone."""
    root = perfect_tree(4)
    expected = shape(root, 15)
    nodes = [node for level in levels(root, 15) for node in level]
    before = [(node.val, node.left, node.right) for node in nodes]
    returned = connect(root)
    after = [(node.val, node.left, node.right) for node in nodes]
    assert after == before, "connect changed val, left or right of a node"
    assert returned is None or returned is root, (
        f"connect returned {returned!r}, not the given root: did it link a copy of the tree?"
    )
    check_links(root, None, expected)


@pytest.mark.points(3)
def test_connect_uses_constant_extra_space(connect):
    """Peak memory allocated during connect does not grow from 1,023 to 131,071 nodes."""
    small, large = perfect_tree(10), perfect_tree(17)
    _, small_peak = peak_bytes(lambda: connect(small))
    expected = shape(large, sys.maxsize)
    returned, large_peak = peak_bytes(lambda: connect(large))
    assert large_peak <= small_peak + 8 * 1024, (
        f"connect allocated up to {small_peak:,} bytes on 1,023 nodes but {large_peak:,} "
        "on 131,071 nodes: its extra space grows with the tree (a queue? a list per level?)"
    )
    check_links(large, returned, expected)


@pytest.mark.points(2)
def test_a_chain_far_deeper_than_the_recursion_limit_is_linked(connect):
    """A chain 100,000 nodes deep (ending in two leaves) is linked without recursion."""
    depth = max(100_000, 50 * sys.getrecursionlimit())
    root = path_tree(["left"] * depth)
    tip = root
    while tip.left is not None:
        tip = tip.left
    tip.left, tip.right = Node(-1), Node(-2)  # one level of width 2 at the very bottom
    connect_and_check(connect, root)
