"""The tools that make and check the notebooks: ``course release``, solution regions, the
no-answer rule, students' work, prose claims, notebook execution and the nbval plugin.
"""
