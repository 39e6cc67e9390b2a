//! SPEC §18, fleet membership and key lifecycle (capability `membership`): hosts join, leave and
//! re-key while the fleet runs, with OpenSSH host certificates, key revocation lists and trust
//! files re-read without a restart.
//!
//! One file per concept:
//! - [`files`] — which variable names each file; errors that name the file and the line (MEM-1)
//! - [`peers`], [`ca`], [`krl`] — the three trust files' formats (MEM-1, MEM-2, MEM-4)
//! - [`cert`] — an OpenSSH host certificate, read once and checked (MEM-2)

pub mod ca;
pub mod cert;
pub mod files;
pub mod krl;
pub mod peers;
