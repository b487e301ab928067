"""Absorbing the classifiers a team already runs: teachers (Hugging Face
sequence-classification folders, heads of other bundles, files of answers) turned into
heads of one bundle; a trunk diagnosis's sample encoded with bundles (what is measured of
it, and the comparing of teachers, are :mod:`manyheads.evaluate.diagnosis`'s)."""

from ..evaluate.diagnosis import TeacherDiagnosis, TrunkDiagnosis, diagnose_teachers
from .absorb import AbsorbReport, HeadReport, absorb_teachers, soften
from .diagnose import diagnose_trunks
from .teachers import Teacher, TeacherAnswers, load_teacher, parse_teacher

__all__ = [
    "AbsorbReport",
    "HeadReport",
    "Teacher",
    "TeacherAnswers",
    "TeacherDiagnosis",
    "TrunkDiagnosis",
    "absorb_teachers",
    "diagnose_teachers",
    "diagnose_trunks",
    "load_teacher",
    "parse_teacher",
    "soften",
]
