-- Where a plan came from (SPEC §20.2): the `source` an apply or a proposal was given,
-- `{"repo", "commit", "ref"?, "path"?}` as JSON text, kept on the revision the apply
-- made and on the proposal; none when it was not given. No part of the plan or its
-- hash (docs/decisions/0029).
ALTER TABLE fleet_revisions ADD COLUMN source TEXT;
ALTER TABLE proposals ADD COLUMN source TEXT;
