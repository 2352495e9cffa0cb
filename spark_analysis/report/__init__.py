"""Reporting: ``summary.json`` in the truth files' terms (``summary``) and the HTML report (``html``)."""
