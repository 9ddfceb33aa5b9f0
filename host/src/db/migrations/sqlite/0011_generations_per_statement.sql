-- PostgreSQL's generation triggers become statement-level in this step (see its file).
-- SQLite's stay per row: there a row's trigger is one in-process update, and SQLite
-- has no statement-level triggers.
SELECT 1;
