"""The math of the course: attention, positions, layers, and the models built from them.

Imports nothing from ``runtime``, ``authoring``, ``checks`` or ``grading``.
"""
