"""THE PROBLEM RULES: what makes one name need a human before external-dns may have it as it is.

``status`` words each problem in a sentence (``provider/status/analysis.py``), adoption hands external-dns
only names with none (``provider/ownership/adopt.py``), and Records counts the names with one for the
``names_needing_attention`` gauge (:func:`count_needing_attention`): all three ask :func:`problems`.

A name's *holders* are the nodes whose server holds a ``<name>--load-<N>-`` token, in our slots or in a
form we never edit (two nodes sharing one server are two holders); its *plain holders* the nodes whose
server holds it as a plain (CNAME) alias. The server of a node that left the cluster is no holder: ``status``
lists it apart and the next apply moves its tokens (``provider/read/departed.py``). A name breaks:

1. *Ingress nodes only*: a holder that is no ingress node. LanDB sends it a share of the name's requests
   (a node relabelled out still holds every name it held).
2. *One N, one carrier*: an N held by two nodes. LanDB needs one N per carrier.
3. *One token per carrier*: a node holding the name more than once (the same N twice too).
4. *No plain alias beside*: holders and a plain holder at once. LanDB would publish a CNAME and A
   records for one name.

The cases (``w`` is no ingress node, ``*N`` an N held in a form we never edit):

| holders     | plain | problems           | why                                                    |
|-------------|-------|--------------------|--------------------------------------------------------|
| a:0 b:1     |       | none               | ingress nodes, one N each, each its own                |
| a:0 b:*1    |       | none               | an N we never edit is an N like another                |
| a:0 w:1     |       | 1: w               | w is sent requests it does not serve                   |
| a:0 b:0     |       | 2: N=0 on a, b     | LanDB needs one N per carrier                          |
| a:0,1 b:2   |       | 3: a holds 0, 1    | a carrier holds one token of a name                    |
| a:0,0       |       | 3: a holds 0, 0    | the same N in two keys is two tokens                   |
| a:0         | p     | 4: plain on p      | a CNAME and A records for one name                     |
| none        | p     | none               | a plain alias alone is LanDB's, not ours to judge      |

*Fast path*: :func:`count_needing_attention` runs after every write of Records, over the holder index
planning keeps (``landb/holders.py``), never a Holding per token: a Holding for each of the 500,000 tokens
of 500 nodes x 1,000 names cost seconds. A name whose holders are all ingress nodes' own servers (no two
nodes on one server), each holding it once with its own N in our slots (``Holders.held_once``), and whose
servers hold no plain alias of it, breaks no rule: a few set operations per name tell (``names_to_judge``).
Every other name is judged by :func:`problems` from its holders' Ns. tests/unit/test_problem_rules.py checks
the rows above; tests/unit/test_adoption_and_status.py that no name the fast path leaves out has a problem.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from itertools import chain
from typing import NamedTuple

from landb_webhook.backends import Node
from landb_webhook.provider.read.inventory import Inventory

NOT_INGRESS = "not_ingress"
SHARED_INDEX = "shared_index"
HELD_TWICE = "held_twice"
PLAIN_BESIDE = "plain_beside"


Holder = tuple[str, Sequence[int], bool]
"""A node whose server holds the name, as the rules see it: (node name, its Ns of the name, whether it is an
ingress node). Its Ns are one per token, ours or in a form we never edit (the same N twice is two). A plain
tuple, not a NamedTuple: with every name judged at 500 nodes x 1,000 names (two nodes on one server), making
500,000 NamedTuples took the gauge from 1.5 s to 2.1 s of CPU."""


class Problem(NamedTuple):
    """One rule a name breaks: ``rule`` its number above, ``kind`` a fixed word for the machine."""

    rule: int
    kind: str
    nodes: tuple[str, ...]
    """1 and 3: the holder; 2: the node holding the N and an earlier holder of it; 4: the plain holders."""
    indices: tuple[int, ...] = ()
    """1: the holder's Ns; 2: the N; 3: the holder's Ns, sorted."""


def problems(holders: Iterable[Holder], plain: Sequence[str] = ()) -> Iterator[Problem]:
    """The rules one name breaks, each as soon as the holders read so far show it, so that
    ``any(problems(...))`` stops at the first. Rule 2 comes once for each holder of an N an earlier holder
    holds, naming both: the nodes of one N are the union of its rule 2 problems."""
    holders = iter(holders)
    if (first := next(holders, None)) is None:
        return
    if plain:  # rule 4: a holder, and a plain alias beside it
        yield Problem(4, PLAIN_BESIDE, tuple(plain))
    first_holder: dict[int, str] = {}
    for node, indices, ingress in chain((first,), holders):
        if not ingress:  # rule 1
            yield Problem(1, NOT_INGRESS, (node,), tuple(indices))
        if len(indices) > 1:  # rule 3
            yield Problem(3, HELD_TWICE, (node,), tuple(sorted(indices)))
        for index in indices:  # rule 2
            if (earlier := first_holder.setdefault(index, node)) != node:
                yield Problem(2, SHARED_INDEX, (earlier, node), (index,))


# -- the fast path: Records' gauge ------------------------------------------------------------------------


def count_needing_attention(inventory: Inventory, *, domain: str) -> int:
    """How many names break a rule (as many as ``status`` reports with a problem): Records counts them
    after every write, for the ``names_needing_attention`` gauge."""
    return sum(
        1 for _, holders, plain in names_to_judge(inventory, domain=domain) if any(problems(holders, plain))
    )


def names_to_judge(inventory: Inventory, *, domain: str) -> Iterator[tuple[str, Iterator[Holder], list[str]]]:
    """Every name of the holder index but those certainly fine (the fast path above), with its holders,
    made from the index only when read, and its plain holders."""
    holders = inventory.holders()
    nodes_of: dict[str, list[Node]] = defaultdict(list)
    for node in inventory.nodes:
        if (server := inventory.servers.get(node.name)) is not None:
            nodes_of[server.id].append(node)
    shared = len(nodes_of) != len(inventory.servers)
    """Nodes sharing a server: each is a holder of its own."""
    ingress = inventory.ingress_server_ids()
    plain: dict[str, set[str]] = defaultdict(set)
    if inventory.plain_aliases(domain):
        for state in inventory.server_states():
            if state.server_id in nodes_of:
                for label, _ in state.aliases.plain_aliases():
                    plain[label].add(state.server_id)
    for label in holders.editable.keys() | holders.pinned.keys():
        editable, pinned = holders.editable.get(label, {}), holders.pinned.get(label, {})
        if (
            not shared  # rule 2: two nodes on one server hold its Ns both
            and not pinned  # rules 2 and 3: held_once counts our slots only
            and label not in plain  # rule 4
            and editable.keys() <= ingress  # rule 1
            and holders.held_once(label) is not None  # rules 2 and 3
        ):
            continue  # certainly fine
        plain_nodes = [node.name for sid in sorted(plain.get(label, ())) for node in nodes_of[sid]]
        yield label, _holders(editable, pinned, ingress, nodes_of), plain_nodes


def _holders(
    editable: Mapping[str, Sequence[tuple[str, str, int]]],
    pinned: Mapping[str, list[int]],
    ingress: Set[str],
    nodes_of: Mapping[str, list[Node]],
) -> Iterator[Holder]:
    """The holders of one name, those on no ingress node's server first: a node relabelled out makes every
    name it holds one to judge, and rule 1 then stops at its holding. A departed node's server is none."""
    servers = editable.keys() | pinned.keys() if pinned else editable.keys()
    outside = {sid for sid in servers - ingress if sid in nodes_of}
    if outside:
        held: Iterable[str] = chain(
            outside, (sid for sid in servers if sid in nodes_of and sid not in outside)
        )
    else:
        held = servers & nodes_of.keys()
    for sid in held:
        indices = [index for _, _, index in editable.get(sid, ())]
        if sid in pinned:
            indices += pinned[sid]
        for node in nodes_of[sid]:
            yield node.name, indices, node.is_ingress
