"""A fast hashed character n-gram trunk (``ngram``): TF-IDF without a vocabulary, in numpy.

The features are those of the ``tfidf`` preset of :class:`~manyheads.trunks.hashing.HashingTrunk`
(character 1-5-grams inside word boundaries, lowercased, sublinear term frequency,
an idf fitted on training texts, hashed into 16,384 buckets, L2-normalised), but
computed without a per-text Python loop: a batch of texts is joined into one
string, read as an array of code points (UTF-32), and every n-gram of every text
is hashed at once (a polynomial hash of its code points, then multiply-shift
into the buckets). Counting is one sort of ``row * dim + bucket`` keys. Batches
run on a thread pool: numpy releases the GIL in the array work, so both cores of
a 2-core machine are used.

Word boundaries follow scikit-learn's ``char_wb``: each text is padded with a
space on both sides, every run of whitespace reads as one boundary, and an
n-gram may hold a space only at its first or last place. The hash differs from
scikit-learn's (MurmurHash3 of the UTF-8 n-gram), so an ``ngram`` bundle's
heads are not interchangeable with a ``tfidf`` bundle's: it is a trunk of its
own, and ``tfidf`` bundles answer exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .base import check_texts
from .idf import IdfTrunk

__all__ = ["NgramTrunk", "hashed_ngrams"]

_VERSION = 1
# the hash: a polynomial over code points, then Knuth's multiply-shift into the buckets
_P = np.uint64(0x100000001B3)
_MIX = np.uint64(0x9E3779B97F4A7C15)
# whitespace beyond ASCII (str.isspace); every one reads as a plain space
_UNICODE_SPACES = np.array(
    [0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, *range(0x2000, 0x200B)],
    dtype=np.uint32,
)


def _code_points(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(cp, starts)``: the texts as one array of code points, each padded with a space
    both sides (whitespace folded to one space), and where each padded text starts."""
    joined = " " + "  ".join(texts) + " "
    cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    space = cp <= 32
    if len(cp) and int(cp.max()) >= 0x85:
        space |= np.isin(cp, _UNICODE_SPACES)
    cp = np.where(space, np.uint32(32), cp)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 2
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return cp, starts


def hashed_ngrams(
    texts: Sequence[str], dim: int, ngram_range: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, counts)`` of a CSR matrix of n-gram counts per bucket: row
    ``i`` is ``texts[i]``, buckets sorted within a row. ``dim`` is a power of two.

    Each row's buckets go into one row of a padded matrix that is sorted along its
    rows (a radix sort for 16-bit buckets): many short sorts, not one long one."""
    n = len(texts)
    cp, starts = _code_points(texts)
    length = len(cp)
    bits = np.uint64(64 - (dim.bit_length() - 1))
    is_space = cp == 32
    spaces = np.zeros(length + 1, dtype=np.int32)
    np.cumsum(is_space, out=spaces[1:])
    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(starts))
    lo, hi = ngram_range
    h = cp.astype(np.uint64) + np.uint64(1)
    c1 = h
    found: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, buckets) of each size
    for size in range(1, hi + 1):
        count = length - size + 1
        if count <= 0:
            break
        if size > 1:
            h = h[:count] * _P + c1[size - 1 :]
        if size < lo:
            continue
        if size == 1:
            ok = ~is_space
        else:
            # no space inside the n-gram; a space may end or start it, not both (n=2)
            interior = spaces[size - 1 : size - 1 + count] - spaces[1 : 1 + count]
            ok = interior == 0
            if size == 2:
                ok &= ~(is_space[:count] & is_space[1 : 1 + count])
        at = np.flatnonzero(ok)
        bucket = ((h[at] ^ np.uint64(size * 0x51ED27)) * _MIX) >> bits
        found.append((row_of[at], bucket))
    # the place of each n-gram in its row: the row's n-grams of smaller sizes, then its
    # rank among those of its size (rows ascend within a size)
    per_size = [np.bincount(rows, minlength=n) for rows, _ in found]
    width = int(np.sum(per_size, axis=0).max()) if found and n else 0
    sentinel = dim
    dtype = np.uint16 if dim < 2**16 else np.uint32
    grid = np.full((n, max(width, 1)), sentinel, dtype=dtype)
    before = np.zeros(n, dtype=np.int64)
    for (rows, bucket), counts in zip(found, per_size, strict=True):
        first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        rank = np.arange(len(rows)) - first[rows]
        grid[rows, before[rows] + rank] = bucket
        before += counts
    grid.sort(axis=1, kind="stable")
    flat = grid.ravel()
    new = np.empty(flat.shape, dtype=bool)
    new[0:1] = True
    np.not_equal(flat[1:], flat[:-1], out=new[1:])
    new.reshape(grid.shape)[:, 0] = True
    first = np.flatnonzero(new)
    counts = np.diff(np.append(first, len(flat)))
    values = flat[first]
    real = values != sentinel
    first, counts, values = first[real], counts[real], values[real]
    indptr = np.searchsorted(first, np.arange(n + 1) * grid.shape[1])
    return indptr, values.astype(np.int32), counts


class NgramTrunk(IdfTrunk):
    """Hashed character n-grams with sublinear tf and a fitted idf, computed in numpy.

    Parameters
    ----------
    dim : int
        Number of hash buckets, a power of two in [256, 4194304].
    ngram_range : (int, int)
        Smallest and largest n-gram length (characters).
    lowercase : bool
    idf : bool
        Weight buckets by ``log((1 + n) / (1 + df)) + 1`` fitted on training texts.
    batch_size : int
        Texts hashed at once; batches run on ``threads`` threads.
    threads : int
        Threads for the batches; 0 = the machine's cores (at most 8).
    """

    cacheable = False  # recomputing is cheaper than reading wide vectors back
    _spec_version = _VERSION
    _spec_fields = ("lowercase", "idf")
    type_name = "ngram"

    def __init__(
        self,
        dim: int = 2**14,
        ngram_range: tuple[int, int] = (1, 5),
        lowercase: bool = True,
        idf: bool = True,
        batch_size: int = 256,
        threads: int = 0,
    ) -> None:
        if not isinstance(dim, int) or not 256 <= dim <= 2**22 or dim & (dim - 1):
            raise ConfigError(
                f"ngram trunk dim must be a power of two in [256, 4194304], got {dim!r}"
            )
        lo, hi = ngram_range
        if not 1 <= lo <= hi <= 10:
            raise ConfigError(f"ngram_range must satisfy 1 <= lo <= hi <= 10, got {ngram_range!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(
                f"ngram trunk batch_size must be a positive integer, got {batch_size!r}"
            )
        if not isinstance(threads, int) or threads < 0:
            raise ConfigError(f"ngram trunk threads must be 0 or more, got {threads!r}")
        self._dim = dim
        self.ngram_range = (int(lo), int(hi))
        self.lowercase = bool(lowercase)
        self.idf = bool(idf)
        self.batch_size = batch_size
        self.threads = threads or min(8, os.cpu_count() or 1)
        self.idf_: np.ndarray | None = None
        self._hashed: str | None = None

    @property
    def name(self) -> str:
        """``ngram`` with the default settings, else ``ngram`` and what differs."""
        default = NgramTrunk.__new__(NgramTrunk)
        NgramTrunk.__init__(default)
        if self._config() == default._config():
            return "ngram"
        return f"ngram(dim={self._dim},n={self.ngram_range[0]}-{self.ngram_range[1]})"

    # -- the hashing, in batches on threads ----------------------------------------

    def _batches(
        self, texts: list[str]
    ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray | None]:
        """The batches' counts, and the order of the texts they hold (``None``: as given).
        Texts go in batches of like length (each batch is padded to its longest text)."""
        if self.lowercase:
            texts = list(map(str.lower, texts))
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        order: np.ndarray | None = None
        if len(texts) > self.batch_size and lengths.max() > 2 * max(np.median(lengths), 1):
            order = np.argsort(lengths, kind="stable")
            texts = [texts[i] for i in order]
        pieces = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

        def one(piece: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return hashed_ngrams(piece, self._dim, self.ngram_range)

        if len(pieces) < 2 or self.threads < 2:
            return [one(p) for p in pieces], order
        with ThreadPoolExecutor(min(self.threads, len(pieces))) as pool:
            return list(pool.map(one, pieces)), order

    def _bucket_rows(self, texts: list[str]) -> Iterable[np.ndarray]:
        return (indices for _, indices, _ in self._batches(texts)[0])

    # -- protocol ---------------------------------------------------------------

    def encode_features(self, texts: Sequence[str], *, progress: bool = False) -> sp.csr_matrix:
        """Rows as a sparse CSR float32 matrix, L2-normalised."""
        texts = check_texts(texts)
        self._check_fitted()
        blocks = []
        batches, order = self._batches(texts)
        for indptr, indices, counts in batches:
            data = np.log1p(counts.astype(np.float32))  # sublinear tf
            if self.idf_ is not None:
                data *= self.idf_[indices]
            rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(indptr) - 1))
            norms[norms == 0] = 1.0
            data /= norms[rows].astype(np.float32)
            shape = (len(indptr) - 1, self._dim)
            blocks.append(sp.csr_matrix((data, indices, indptr), shape=shape))
        if not blocks:
            return sp.csr_matrix((0, self._dim), dtype=np.float32)
        out = blocks[0] if len(blocks) == 1 else sp.vstack(blocks, format="csr")
        if order is not None:  # back to the order the texts were given in
            out = out[np.argsort(order)]
        return out

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        return np.asarray(self.encode_features(texts).toarray(), dtype=np.float32)

    def __repr__(self) -> str:
        return f"NgramTrunk(dim={self._dim}, ngram_range={self.ngram_range}, idf={self.idf})"
