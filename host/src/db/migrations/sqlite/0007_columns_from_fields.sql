-- Module columns are named by their fields in snake_case (the storage layer derives
-- them from the kinds' descriptors): an offer's `to` is the column "to".
ALTER TABLE offers RENAME COLUMN to_owner TO "to";
