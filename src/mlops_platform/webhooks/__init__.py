"""Admission and conversion webhooks."""
