"""DNS FIRST: whether a name this cluster does not publish yet may be written, from what DNS answers for it.

LanDB takes a new cluster's ``--load-N-`` tokens into the round robin of a name another device already
publishes (docs/landb-nova-facts.md): written blindly, any Ingress could pull part of someone else's
traffic, and the DNS watch would say so only after LanDB's next sync, the harm done. So before the first
write of a name, DNS is asked once, and the answer decides:

1. a name is *new* when this cluster neither claims it (a TXT claim stored before this apply) nor carries
   it (a server or a load balancer's tag of ours): only new names are asked; a name already published is
   never asked again (a node joining still gets it while DNS is down);
2. what DNS answers for a new name decides, by the table below; ``ours`` is every address of this
   cluster: its nodes' (carriers or not), its former carriers' (DNS lags a removal by a sync), and the
   load balancers it tags;
3. a name listed for take-over (LANDB_TAKEOVER_NAMES) is written whatever DNS answers, even nothing: the
   operator decided; the answer only tells what it takes over.

| DNS answers for a new name                           | not listed           | listed for take-over     |
|------------------------------------------------------|----------------------|--------------------------|
| NXDOMAIN, or the name with no A record               | written              | written                  |
| only addresses in ``ours``                           | written              | written                  |
| another address (alone or beside ours), or a CNAME   | refused, with answer | written, taking over     |
| nothing: the resolver failed, or not in time         | held back: asked     | written                  |
|                                                      | again next loop      |                          |

Pure: the lookups are made by the caller (provider/apply/first_look.py); tests/property/
test_first_look_properties.py restates the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from landb_webhook.landb.propagation import Addresses, Alias, Answer, NoAnswer, NoName

NOT_ASKED = NoAnswer("not answered within the reply deadline")
"""What a name whose lookup did not end in time counts as: no answer."""


@dataclass(frozen=True)
class FirstLook:
    """What DNS decided for the new names of one apply (labels)."""

    written: frozenset[str] = frozenset()
    """May be written now: nothing else answers them, or they are listed for take-over."""
    refused: Mapping[str, Answer] = field(default_factory=dict)
    """Answered elsewhere (another address, a CNAME), with what DNS answers: nothing is written."""
    held_back: Mapping[str, NoAnswer] = field(default_factory=dict)
    """DNS did not answer: not written in this apply, asked again by the next."""
    taking_over: Mapping[str, Answer] = field(default_factory=dict)
    """Listed for take-over and answered elsewhere (a subset of ``written``): what they take over."""

    @property
    def kept_back(self) -> frozenset[str]:
        """Neither written nor claimed in this apply: refused or held back."""
        return frozenset(self.refused.keys() | self.held_back.keys())


def new_names(publish: Set[str], claimed: Set[str], carried: Set[str]) -> frozenset[str]:
    """Rule 1: the names to publish that this cluster neither claims nor carries: the ones DNS is asked."""
    return frozenset(label for label in publish if label not in claimed and label not in carried)


def elsewhere(answer: Answer, ours: Set[str]) -> bool:
    """Whether DNS answers something this cluster does not publish: another address, or a CNAME."""
    if isinstance(answer, Alias):
        return True
    if isinstance(answer, Addresses):
        return not answer.ips <= ours
    return False


def decide(
    asked: Set[str], answers: Mapping[str, Answer], ours: Set[str], takeover: Set[str] = frozenset()
) -> FirstLook:
    """Rules 2 and 3 for every name ``asked`` (labels), given ``answers`` (label -> what DNS answered; a
    name missing from it was not answered in time) and ``ours`` (the cluster's addresses)."""
    written: set[str] = set()
    refused: dict[str, Answer] = {}
    held_back: dict[str, NoAnswer] = {}
    taking_over: dict[str, Answer] = {}
    for label in asked:
        answer = answers.get(label, NOT_ASKED)
        listed = label in takeover
        if isinstance(answer, NoAnswer):
            if listed:  # row 4, listed: the operator decided, whatever DNS answers
                written.add(label)
            else:  # row 4
                held_back[label] = answer
        elif isinstance(answer, NoName) or not elsewhere(answer, ours):  # rows 1 and 2
            written.add(label)
        elif listed:  # row 3, listed
            written.add(label)
            taking_over[label] = answer
        else:  # row 3
            refused[label] = answer
    return FirstLook(frozenset(written), refused, held_back, taking_over)
