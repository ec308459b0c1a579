"""Admission control: tenants' budgets and the in-flight limit, applied before routing.

``controller`` applies the routing file's ``admission:`` section to each request, ``gate``
holds the in-flight limit and its queue, ``usage`` counts what each budget spent over the
last minute.
"""
