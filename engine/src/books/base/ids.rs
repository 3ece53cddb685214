//! Names and numbers of the books: runs, steps, workers, fencing tokens and
//! effect keys.
//!
//! Invariant: every name is 1 to `NAME_LEN_BYTES_MAX` bytes of
//! `[A-Za-z0-9._:-]`, checked on construction *and* on decode, so a name
//! never contains `/` and the effect-key encoding `run/step/attempt` is
//! injective.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::books::base::limits::NAME_LEN_BYTES_MAX;

/// The longest idempotency key [`EffectKey::tool_key`] hands a tool.
pub const TOOL_KEY_BYTES_MAX: usize = 255;
use crate::error::{Error, Result};

/// Whether each byte value may appear in a name. A name is ASCII, so
/// checking its bytes checks its characters (no byte of a multi-byte
/// character is one of these). A table, since names are checked again at
/// every decode: an open reads each live run's row, three names or so a
/// row, and the check by characters was 7.5% of the samples of an open of
/// 200 runs (docs/PERFORMANCE.md, "An open that writes nothing").
const NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = is_name_char(b as u8 as char);
        b += 1;
    }
    table
};

/// True for the characters a name may hold.
const fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')
}

/// Checks that `name` is a valid name; `what` says what it names.
pub(crate) fn validate_name(what: &'static str, name: &str) -> Result<()> {
    if !name.is_empty()
        && name.len() <= NAME_LEN_BYTES_MAX
        && name.bytes().all(|b| NAME_BYTES[usize::from(b)])
    {
        return Ok(());
    }
    let reason = if name.is_empty() {
        Some("it is empty".to_string())
    } else if name.len() > NAME_LEN_BYTES_MAX {
        Some(format!(
            "it is {} bytes long; the maximum is {NAME_LEN_BYTES_MAX}",
            name.len()
        ))
    } else {
        name.chars()
            .find(|c| !is_name_char(*c))
            .map(|c| format!("it contains {c:?}; names use only A-Z a-z 0-9 and . _ - :"))
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidName {
            what,
            // Bounded so a megabyte of garbage does not land in a log line.
            name: name.chars().take(NAME_LEN_BYTES_MAX).collect(),
            reason,
        }),
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $what:literal) => {
        $(#[$doc])*
        ///
        /// Cloning is cheap (a shared, immutable string), and so is
        /// comparing two clones; it encodes as the plain string and is
        /// validated again when decoded.
        #[derive(Clone, Debug, Eq)]
        pub struct $ty(Arc<str>);

        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.hash(state);
            }
        }

        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
            }
        }

        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                if Arc::ptr_eq(&self.0, &other.0) {
                    std::cmp::Ordering::Equal
                } else {
                    self.0.cmp(&other.0)
                }
            }
        }

        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl $ty {
            /// Validates `name` (see the module docs for the rules).
            pub fn new(name: impl Into<String>) -> Result<Self> {
                let name = name.into();
                validate_name($what, &name)?;
                Ok($ty(Arc::from(name)))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        // Equality, order and hash are the string's, so maps keyed by the
        // id can be looked up by `&str`.
        impl std::borrow::Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $ty {
            type Error = Error;
            fn try_from(name: String) -> Result<Self> {
                Self::new(name)
            }
        }

        impl From<$ty> for String {
            fn from(id: $ty) -> String {
                id.0.to_string()
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                $ty::new(name).map_err(serde::de::Error::custom)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// The name of a run, chosen by the caller (for example `po-2026-06-10-17`).
    RunId,
    "run id"
);
name_type!(
    /// The name of a logical step within a run (for example `charge-card`);
    /// stable across retries and restarts.
    StepId,
    "step id"
);
name_type!(
    /// The name of a resource runs take turns holding (for example
    /// `customer:42`), with a lease of its own.
    ResourceId,
    "resource name"
);

name_type!(
    /// The name of a shared key that outlives runs (for example
    /// `dnc:customer-42`).
    SharedKeyId,
    "shared key"
);

name_type!(
    /// The name of a worker process that takes leases.
    WorkerId,
    "worker id"
);

/// The id of the child run that step `step` of run `parent` starts:
/// `<parent>:<step>`, derived, never fresh, so a parent that re-runs the
/// step after a crash names the same child and cannot start a second one.
/// `InvalidName` if the two names together are longer than a name may be.
pub fn child_run_id(parent: &RunId, step: &StepId) -> Result<RunId> {
    RunId::new(format!("{parent}:{step}"))
}

/// The ids of the `count` children that step `step` of run `parent` starts
/// together (a fan-out): `<parent>:<step>.<i>` for `i` from 1, derived as
/// [`child_run_id`] is and for the same reason. `InvalidName` if the
/// longest is longer than a name may be.
pub fn children_run_ids(parent: &RunId, step: &StepId, count: usize) -> Result<Vec<RunId>> {
    (1..=count)
        .map(|i| RunId::new(format!("{parent}:{step}.{i}")))
        .collect()
}

/// A fencing token: grows by one on every lease acquisition of a run, so a
/// holder presenting an older token is provably stale. Token 0 is never
/// issued.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The first token a run hands out.
    pub const FIRST: FencingToken = FencingToken(1);

    /// The token after this one.
    pub fn next(self) -> FencingToken {
        FencingToken(self.0.checked_add(1).expect("fencing tokens exhausted"))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {}", self.0)
    }
}

/// Which side of a logical step an effect is: the act itself, or the
/// compensation registered with it that undoes it (a saga step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EffectKind {
    /// The step's act.
    Act,
    /// The compensation undoing the step's confirmed act.
    Undo,
}

impl EffectKind {
    /// The kind's name in messages and in the key encoding (`act`, `undo`).
    pub fn name(self) -> &'static str {
        match self {
            EffectKind::Act => "act",
            EffectKind::Undo => "undo",
        }
    }
}

/// The idempotency key of one attempt of one side of one logical step:
/// derived from (run, step, kind, attempt), never random, so a restarted
/// worker derives the same key. Attempts start at 1.
///
/// Encoding (what tools receive, see [`EffectKey::encode`]): the UTF-8 text
/// `<run>/<step>/<attempt>` for an act and `<run>/<step>/undo/<attempt>` for
/// its compensation, the attempt in decimal without leading zeros. Names
/// cannot contain `/`, and `undo` is not a number, so the encoding is
/// injective and [`EffectKey::parse`] inverts it. Keys order by run, step,
/// kind, then attempt, so a step's act attempts are adjacent, the latest is
/// last, and its compensation attempts follow them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "EffectKeyFields")]
pub struct EffectKey {
    run: RunId,
    step: StepId,
    kind: EffectKind,
    attempt: u32,
}

/// The serialized fields of an [`EffectKey`], validated on decode.
#[derive(Deserialize)]
struct EffectKeyFields {
    run: RunId,
    step: StepId,
    kind: EffectKind,
    attempt: u32,
}

impl TryFrom<EffectKeyFields> for EffectKey {
    type Error = Error;
    fn try_from(fields: EffectKeyFields) -> Result<Self> {
        EffectKey::of_kind(fields.run, fields.step, fields.kind, fields.attempt)
    }
}

impl EffectKey {
    /// The key of act `attempt` (1-based) of `step` in `run`.
    pub fn new(run: RunId, step: StepId, attempt: u32) -> Result<EffectKey> {
        EffectKey::of_kind(run, step, EffectKind::Act, attempt)
    }

    /// The key of attempt `attempt` (1-based) of `kind` of `step` in `run`.
    pub fn of_kind(run: RunId, step: StepId, kind: EffectKind, attempt: u32) -> Result<EffectKey> {
        if attempt == 0 {
            return Err(Error::InvalidCommand {
                reason: format!(
                    "effect attempt numbers start at 1 ({} of step {step} of run {run})",
                    kind.name()
                ),
            });
        }
        Ok(EffectKey {
            run,
            step,
            kind,
            attempt,
        })
    }

    /// Every key of `kind` of `step` in `run`, first attempt to last: keys
    /// order by run, step, kind, then attempt, so the latest attempt is the
    /// last key of this range.
    pub fn attempts_of(
        run: &RunId,
        step: &StepId,
        kind: EffectKind,
    ) -> std::ops::RangeInclusive<EffectKey> {
        let key = |attempt| EffectKey {
            run: run.clone(),
            step: step.clone(),
            kind,
            attempt,
        };
        key(1)..=key(u32::MAX)
    }

    /// The run the effect belongs to.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    /// The logical step.
    pub fn step(&self) -> &StepId {
        &self.step
    }

    /// The act, or its compensation.
    pub fn kind(&self) -> EffectKind {
        self.kind
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The key of the next attempt of the same side of the same step.
    pub fn next_attempt(&self) -> Result<EffectKey> {
        let attempt = self
            .attempt
            .checked_add(1)
            .ok_or_else(|| Error::InvalidCommand {
                reason: format!(
                    "{} of step {} of run {} has exhausted its attempts",
                    self.kind.name(),
                    self.step,
                    self.run
                ),
            })?;
        EffectKey::of_kind(self.run.clone(), self.step.clone(), self.kind, attempt)
    }

    /// The text handed to tools as the idempotency key: `run/step/attempt`
    /// for an act, `run/step/undo/attempt` for its compensation.
    pub fn encode(&self) -> String {
        match self.kind {
            EffectKind::Act => format!("{}/{}/{}", self.run, self.step, self.attempt),
            EffectKind::Undo => format!("{}/{}/undo/{}", self.run, self.step, self.attempt),
        }
    }

    /// The idempotency key to send a tool that takes at most
    /// [`TOOL_KEY_BYTES_MAX`] = 255 bytes (the common limit of payment
    /// APIs): [`encode`](EffectKey::encode) when it fits, which it does
    /// unless run and step names are long; otherwise `actum-` and the
    /// BLAKE3 digest of the encoded key in hex (70 bytes), the same for the
    /// same key on every resume and different for different keys.
    pub fn tool_key(&self) -> String {
        let encoded = self.encode();
        if encoded.len() <= TOOL_KEY_BYTES_MAX {
            return encoded;
        }
        format!(
            "actum-{}",
            crate::books::base::digest::digest_of(encoded.as_bytes())
        )
    }

    /// Inverts [`EffectKey::encode`].
    pub fn parse(text: &str) -> Result<EffectKey> {
        let bad = || Error::InvalidName {
            what: "effect key",
            name: text.chars().take(3 * NAME_LEN_BYTES_MAX).collect(),
            reason: "an effect key is run/step/attempt or run/step/undo/attempt, with attempt a \
                     decimal from 1"
                .to_string(),
        };
        let fields: Vec<&str> = text.splitn(5, '/').collect();
        let (run, step, kind, attempt) = match fields.as_slice() {
            [run, step, attempt] => (run, step, EffectKind::Act, attempt),
            [run, step, "undo", attempt] => (run, step, EffectKind::Undo, attempt),
            _ => return Err(bad()),
        };
        let canonical = !attempt.starts_with('0') && attempt.bytes().all(|b| b.is_ascii_digit());
        let attempt: u32 = attempt.parse().map_err(|_| bad())?;
        if !canonical {
            return Err(bad());
        }
        EffectKey::of_kind(RunId::new(*run)?, StepId::new(*step)?, kind, attempt)
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_key_fits_in_255_bytes_and_names_one_key() {
        let short = EffectKey::new(
            RunId::new("order-17").unwrap(),
            StepId::new("pay").unwrap(),
            2,
        )
        .unwrap();
        assert_eq!(short.tool_key(), "order-17/pay/2");
        let long = |attempt| {
            EffectKey::new(
                RunId::new("r".repeat(NAME_LEN_BYTES_MAX)).unwrap(),
                StepId::new("s".repeat(NAME_LEN_BYTES_MAX)).unwrap(),
                attempt,
            )
            .unwrap()
        };
        let (first, second) = (long(1).tool_key(), long(2).tool_key());
        assert!(long(1).encode().len() > TOOL_KEY_BYTES_MAX);
        assert!(
            first.len() <= TOOL_KEY_BYTES_MAX && first.starts_with("actum-"),
            "{first}"
        );
        assert_eq!(first, long(1).tool_key(), "stable");
        assert_ne!(first, second, "distinct");
        let undo = EffectKey::of_kind(
            RunId::new("r".repeat(NAME_LEN_BYTES_MAX)).unwrap(),
            StepId::new("s".repeat(NAME_LEN_BYTES_MAX)).unwrap(),
            EffectKind::Undo,
            1,
        )
        .unwrap();
        assert!(undo.tool_key().len() <= TOOL_KEY_BYTES_MAX);
        assert_ne!(undo.tool_key(), first);
    }

    #[test]
    fn names_are_validated() {
        assert!(RunId::new("po-2026:17_a.b").is_ok());
        assert!(matches!(RunId::new(""), Err(Error::InvalidName { .. })));
        assert!(matches!(RunId::new("a/b"), Err(Error::InvalidName { .. })));
        assert!(matches!(StepId::new("a b"), Err(Error::InvalidName { .. })));
        assert!(WorkerId::new("w".repeat(NAME_LEN_BYTES_MAX)).is_ok());
        assert!(WorkerId::new("w".repeat(NAME_LEN_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn the_byte_table_takes_exactly_the_name_characters() {
        // Every one- and two-byte character, alone and inside a name: the
        // table's answer is the characters' rule, and a refusal names the
        // character.
        for c in (0..0x800).filter_map(char::from_u32) {
            let allowed = c.is_ascii_alphanumeric() || ".-_:".contains(c);
            for name in [c.to_string(), format!("a{c}b")] {
                match validate_name("run", &name) {
                    Ok(()) => assert!(allowed, "{c:?} taken"),
                    Err(Error::InvalidName { reason, .. }) => {
                        assert!(!allowed, "{c:?} refused");
                        assert!(reason.contains(&format!("{c:?}")), "{reason}");
                    }
                    Err(other) => panic!("{other}"),
                }
            }
        }
    }

    #[test]
    fn decode_validates_names() {
        let bytes = postcard::to_stdvec(&"a/b".to_string()).unwrap();
        assert!(postcard::from_bytes::<RunId>(&bytes).is_err());
        let good = postcard::to_stdvec(&RunId::new("ok").unwrap()).unwrap();
        assert_eq!(postcard::from_bytes::<RunId>(&good).unwrap().as_str(), "ok");
    }

    #[test]
    fn effect_key_encoding_round_trips_and_is_deterministic() {
        let key =
            EffectKey::new(RunId::new("r1").unwrap(), StepId::new("pay").unwrap(), 3).unwrap();
        assert_eq!(key.encode(), "r1/pay/3");
        assert_eq!(EffectKey::parse("r1/pay/3").unwrap(), key);
        assert_eq!(key.next_attempt().unwrap().attempt(), 4);
        for bad in [
            "r1/pay",
            "r1/pay/0",
            "r1/pay/03",
            "r1/pay/3/x",
            "r1/pay/+3",
            "/pay/1",
        ] {
            assert!(EffectKey::parse(bad).is_err(), "{bad} parsed");
        }
        assert!(EffectKey::new(key.run().clone(), key.step().clone(), 0).is_err());
    }

    #[test]
    fn undo_keys_encode_apart_from_acts_and_order_after_them() {
        let r = RunId::new("r1").unwrap();
        let s = StepId::new("sweep").unwrap();
        let undo = EffectKey::of_kind(r.clone(), s.clone(), EffectKind::Undo, 2).unwrap();
        assert_eq!(undo.encode(), "r1/sweep/undo/2");
        assert_eq!(EffectKey::parse("r1/sweep/undo/2").unwrap(), undo);
        assert_eq!(undo.next_attempt().unwrap().kind(), EffectKind::Undo);
        let last_act = EffectKey::new(r, s, u32::MAX).unwrap();
        assert!(
            last_act < undo,
            "every act attempt orders before every undo"
        );
        for bad in [
            "r1/sweep/undo",
            "r1/sweep/undo/0",
            "r1/sweep/redo/1",
            "r1/sweep/undo/1/x",
        ] {
            assert!(EffectKey::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn effect_keys_order_attempts_last() {
        let r = RunId::new("r").unwrap();
        let k = |s: &str, a| EffectKey::new(r.clone(), StepId::new(s).unwrap(), a).unwrap();
        assert!(k("a", 9) < k("b", 1));
        assert!(k("a", 1) < k("a", 2));
    }

    #[test]
    fn fencing_tokens_grow() {
        assert_eq!(FencingToken::FIRST.next(), FencingToken(2));
        assert!(FencingToken(1) < FencingToken(2));
    }
}
