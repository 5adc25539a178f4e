"""The lab: a notebook (lab.ipynb, its source lab.py), its exercises, checks, solutions and helpers; see README.md."""
