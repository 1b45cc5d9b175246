//! The tag bytes of the canonical encoding (`docs/SPEC.md`), one before each value.

pub(super) const NULL: u8 = 0x00;
pub(super) const BOOL: u8 = 0x01;
pub(super) const INTEGER: u8 = 0x02;
pub(super) const LARGE_UNSIGNED: u8 = 0x03;
pub(super) const FLOAT: u8 = 0x04;
pub(super) const TEXT: u8 = 0x05;
pub(super) const BYTES: u8 = 0x06;
pub(super) const SEQ_START: u8 = 0x07;
pub(super) const SEQ_END: u8 = 0x08;
pub(super) const MAP_START: u8 = 0x09;
pub(super) const MAP_END: u8 = 0x0a;
pub(super) const STRUCT_START: u8 = 0x0b;
pub(super) const STRUCT_END: u8 = 0x0c;
pub(super) const UNIT_VARIANT: u8 = 0x0d;
pub(super) const VARIANT: u8 = 0x0e;

/// The bits every NaN hashes as.
pub(super) const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;
