"""Label selector evaluation over all clusters at once (shared by selector and affinity plugins),
or over anything else that indexes labels the same way (a worker's node groups)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from eventlog.events import MatchExpression, SelectorTerm
from reconciler.core.clusters import LabelColumn, Mask
from reconciler.core.framework.interface import Slots


class Labelled(Protocol):
    def label(self, key: str) -> LabelColumn: ...


def expression_mask(table: Labelled, expr: MatchExpression, *, slots: Slots) -> Mask:
    column = table.label(expr.key)
    op = expr.operator
    if op == "In":
        return column.matching(expr.values, slots)
    if op == "NotIn":  # as in Kubernetes: a cluster without the label matches NotIn
        return ~column.matching(expr.values, slots)
    if op == "Exists":
        return np.asarray(column.value_ids[slots] >= 0)
    if op == "DoesNotExist":
        return np.asarray(column.value_ids[slots] < 0)
    try:
        bound = int(expr.values[0]) if len(expr.values) == 1 else None
    except ValueError:
        bound = None
    if bound is None:  # Gt/Lt need exactly one integer; the webhook rejects others
        return np.zeros(len(slots), dtype=np.bool_)
    numeric = column.numeric[slots]
    with np.errstate(invalid="ignore"):
        if op == "Gt":
            return np.asarray(numeric > bound)
        return np.asarray(numeric < bound)


def term_mask(table: Labelled, term: SelectorTerm, *, slots: Slots) -> Mask:
    """An AND of expressions; an empty term matches nothing (as in Kubernetes node affinity)."""
    if not term.match_expressions:
        return np.zeros(len(slots), dtype=np.bool_)
    mask = expression_mask(table, term.match_expressions[0], slots=slots)
    for expr in term.match_expressions[1:]:
        mask = mask & expression_mask(table, expr, slots=slots)
    return mask


def terms_mask(table: Labelled, terms: list[SelectorTerm], *, slots: Slots) -> Mask:
    """An OR of terms."""
    mask = np.zeros(len(slots), dtype=np.bool_)
    for term in terms:
        mask |= term_mask(table, term, slots=slots)
    return mask
