"""`einsum`: contractions named by subscripts, computed one pair of operands at a time as a
batched matrix product (no broadcast product of every operand is ever materialised)."""

import string
from math import prod

from . import _core

Tensor = _core.Tensor
_LETTERS = set(string.ascii_letters)


def _error(msg):
    return RuntimeError(f"einsum(): {msg}")


def _parse_term(term, pos, ndim, k, ell_ndim):
    """The labels of operand k: letters, and ('.', i) for the dims `...` covers, numbered
    so that ellipsis dims of all operands line up from the right."""
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if any(isinstance(x, tuple) for x in labels):
                raise _error(f"found more than one ellipsis ('...') for operand {k}")
            n = ndim - sum(1 for c in term if c in _LETTERS)
            if n < 0:
                break
            labels += [(".", ell_ndim - n + j) for j in range(n)]
            i += 3
            continue
        if term[i] not in _LETTERS:
            raise _error(
                f"invalid subscript given at index {pos + i} in the equation string, "
                "subscripts must be in [a-zA-Z]"
            )
        labels.append(term[i])
        i += 1
    if len(labels) != ndim:
        ell = "..." in term
        raise _error(
            f"the number of subscripts in the equation ({sum(1 for c in term if c in _LETTERS)})"
            f" {'is more than' if ell else 'does not match'} the number of dimensions "
            f"({ndim}) for operand {k}{'' if ell else ' and no ellipsis was given'}"
        )
    return labels


def _diagonal(x, labels, k):
    """Take the diagonal over each label an operand repeats (`ii->i`)."""
    while len(set(labels)) != len(labels):
        seen = {}
        for q, lab in enumerate(labels):
            if lab in seen:
                p = seen[lab]
                break
            seen[lab] = q
        n, m = x.shape[p], x.shape[q]
        if n != m:
            raise _error(
                f"subscript {lab} is repeated for operand {k} but the sizes don't match, {n} != {m}"
            )
        shape = [1] * x.dim()
        shape[p], shape[q] = n, n
        x = (x * _core.eye(n, dtype=x.dtype).reshape(shape)).sum(q)
        labels = labels[:q] + labels[q + 1 :]
    return x, labels


def _sum_out(x, labels, keep):
    dims = [d for d, lab in enumerate(labels) if lab not in keep]
    if dims:
        x = x.sum(dims)
        labels = [lab for lab in labels if lab in keep]
    return x, labels


def _contract(a, la, b, lb, keep, sizes):
    """`a` and `b` (labels `la`, `lb`) multiplied, and summed over the shared labels that
    `keep` does not name: as one batched matrix product."""
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    left = [lab for lab in la if lab not in lb]
    right = [lab for lab in lb if lab not in la]
    nb, nl, nr, nc = (prod(sizes[x] for x in g) for g in (batch, left, right, summed))

    def arranged(x, lx, order):
        x = x.permute([lx.index(lab) for lab in order]) if order else x
        full = [sizes[lab] for lab in order]
        return x.expand(full) if list(x.shape) != full else x

    if a.is_floating_point() and b.is_floating_point():
        out = (
            arranged(a, la, batch + left + summed)
            .reshape(nb, nl, nc)
            .bmm(arranged(b, lb, batch + summed + right).reshape(nb, nc, nr))
        )
        return out.reshape([sizes[x] for x in batch + left + right]), batch + left + right
    # integer operands: a broadcast product, summed (exact, where bmm would go through floats)
    lo = batch + left + summed + right
    ea = arranged(a, la, batch + left + summed).reshape(
        [sizes[x] for x in batch + left + summed] + [1] * len(right)
    )
    eb = arranged(b, lb, batch + summed + right)
    eb = eb.reshape([sizes[x] for x in batch] + [1] * len(left) + list(eb.shape[len(batch) :]))
    x = ea * eb
    return _sum_out(x, lo, set(batch + left + right))


def einsum(equation, *operands):
    """`einsum("ij,jk->ik", a, b)`: sums of products over the labels not in the output,
    with `...` for broadcast dims, repeated labels for diagonals, and the implicit output
    (the labels used once, sorted) when there is no `->`."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    for t in operands:
        if not isinstance(t, Tensor):
            raise TypeError(f"einsum(): operands must be Tensors, not {type(t).__name__}")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) < len(operands):
        raise _error("more operands were provided than specified in the equation")
    if len(terms) > len(operands):
        raise _error("fewer operands were provided than specified in the equation")
    ell_ndim = max(
        (
            t.dim() - sum(1 for c in term if c in _LETTERS)
            for term, t in zip(terms, operands, strict=True)
            if "..." in term
        ),
        default=0,
    )
    ops, pos, counts = [], 0, {}
    for k, (term, t) in enumerate(zip(terms, operands, strict=True)):
        labels = _parse_term(term, pos, t.dim(), k, max(ell_ndim, 0))
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
        ops.append(_diagonal(t, labels, k))
        pos += len(term) + 1
    ellipsis = [(".", i) for i in range(max(ell_ndim, 0))]
    if arrow:
        out = []
        for i, c in enumerate(rhs.replace("...", "\0")):
            if c == "\0":
                out += ellipsis
            elif c not in _LETTERS:
                raise _error(
                    f"invalid subscript given at index {len(lhs) + 2 + i} in the equation "
                    "string, subscripts must be in [a-zA-Z]"
                )
            elif c in out:
                raise _error(f"output subscript {c} appears more than once in the output")
            elif not any(c in labels for _, labels in ops):
                raise _error(
                    f"output subscript {c} does not appear in the equation for any input operand"
                )
            else:
                out.append(c)
    else:
        out = ellipsis + sorted(c for c, n in counts.items() if n == 1 and isinstance(c, str))
    sizes = {}
    for k, (x, labels) in enumerate(ops):
        for lab, n in zip(labels, x.shape, strict=True):
            have = sizes.get(lab, 1)
            if have == 1:
                sizes[lab] = n
            elif n not in (1, have):
                name = "..." if isinstance(lab, tuple) else lab
                raise _error(
                    f"operands do not broadcast: subscript {name} has size {have} and size "
                    f"{n} in operand {k}"
                )
    result, labels = ops[0]
    for j in range(1, len(ops)):
        later = {lab for _, ls in ops[j + 1 :] for lab in ls}
        keep = set(out) | later
        b, lb = ops[j]
        result, labels = _sum_out(result, labels, keep | set(lb))
        b, lb = _sum_out(b, lb, keep | set(labels))
        result, labels = _contract(result, labels, b, lb, keep, sizes)
    result, labels = _sum_out(result, labels, set(out))
    if labels != out:
        result = result.permute([labels.index(lab) for lab in out])
    full = [sizes[lab] for lab in out]
    return result.expand(full) if list(result.shape) != full else result
