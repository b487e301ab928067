"""A bundle in production: corrections kept with the bundle, each head's drift against
its reference, guarded updates (a head is promoted only when it is not worse), and
each head's history and rollback.

- :mod:`~manyheads.learn.drift`: a head's reference (its answers and confidence on
  its validation split, kept at training time) and the distance of a window of
  answers from it.
- :mod:`~manyheads.learn.update`: refitting heads from their kept data and their
  corrections, judged against the head they would replace.

A :class:`~manyheads.bundle.Bundle`'s ``add_feedback``, ``update_heads`` and
``rollback_head`` hand over to these; the corrections and the history are files of
the bundle folder (:mod:`manyheads.bundle.feedback`, :mod:`manyheads.bundle.history`).
"""
