//! Tests of the listing.
