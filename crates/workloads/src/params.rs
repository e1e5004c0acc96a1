//! Workload knobs given as `name=value` strings (from `-p` or a config file), parsed with
//! errors that name the bad value and what is accepted.

use std::collections::BTreeMap;

/// Knob values by name, as the user wrote them.
pub type Params = BTreeMap<String, String>;

/// A knob that is unknown or has a bad value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

/// Reads knobs for one workload, remembering which were used.
pub struct Knobs<'a> {
    workload: &'static str,
    params: &'a Params,
    accepted: &'static [&'static str],
}

impl<'a> Knobs<'a> {
    /// Fails on any knob not in `accepted`.
    pub fn new(
        workload: &'static str,
        params: &'a Params,
        accepted: &'static [&'static str],
    ) -> Result<Self, ParamError> {
        if let Some(k) = params.keys().find(|k| !accepted.contains(&k.as_str())) {
            return Err(ParamError(format!(
                "unknown {workload} knob '{k}': accepted knobs are {}",
                accepted.join(", ")
            )));
        }
        Ok(Knobs {
            workload,
            params,
            accepted,
        })
    }

    fn raw(&self, name: &str) -> Option<&'a str> {
        debug_assert!(self.accepted.contains(&name), "knob {name} not declared");
        self.params.get(name).map(|s| s.trim())
    }

    pub fn u64(&self, name: &str, default: u64, min: u64, max: u64) -> Result<u64, ParamError> {
        let Some(s) = self.raw(name) else {
            return Ok(default);
        };
        let v: u64 = s.replace('_', "").parse().map_err(|_| {
            ParamError(format!(
                "{} {name}={s} is not a whole number: expected an integer in {min}..={max}",
                self.workload
            ))
        })?;
        if v < min || v > max {
            return Err(ParamError(format!(
                "{} {name}={v} is out of range: expected {min}..={max}",
                self.workload
            )));
        }
        Ok(v)
    }

    /// An optional cap: a whole number in `min..=max`, or `none` (the default) for none.
    pub fn cap(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ParamError> {
        match self.raw(name) {
            None | Some("none") => Ok(None),
            Some(_) => self.u64(name, min, min, max).map(Some),
        }
    }

    pub fn f64(&self, name: &str, default: f64, min: f64, max: f64) -> Result<f64, ParamError> {
        let Some(s) = self.raw(name) else {
            return Ok(default);
        };
        let v: f64 = s.parse().map_err(|_| {
            ParamError(format!(
                "{} {name}={s} is not a number: expected a number in {min}..={max}",
                self.workload
            ))
        })?;
        if !(min..=max).contains(&v) {
            return Err(ParamError(format!(
                "{} {name}={v} is out of range: expected {min}..={max}",
                self.workload
            )));
        }
        Ok(v)
    }

    /// A comma-separated list of exactly `len` whole numbers, each in `min..=max`.
    pub fn u64_list(
        &self,
        name: &str,
        len: usize,
        min: u64,
        max: u64,
    ) -> Result<Option<Vec<u64>>, ParamError> {
        let Some(s) = self.raw(name) else {
            return Ok(None);
        };
        let expected = || {
            format!(
                "{} {name}={s} is not accepted: expected {len} comma-separated whole numbers in {min}..={max}",
                self.workload
            )
        };
        let v: Vec<u64> = s
            .split(',')
            .map(|x| x.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| ParamError(expected()))?;
        if v.len() != len || v.iter().any(|x| !(min..=max).contains(x)) {
            return Err(ParamError(expected()));
        }
        Ok(Some(v))
    }

    pub fn choice(
        &self,
        name: &str,
        default: &'static str,
        accepted: &'static [&'static str],
    ) -> Result<&'static str, ParamError> {
        let Some(s) = self.raw(name) else {
            return Ok(default);
        };
        accepted.iter().copied().find(|a| *a == s).ok_or_else(|| {
            ParamError(format!(
                "{} {name}={s} is not accepted: expected one of {}",
                self.workload,
                accepted.join(", ")
            ))
        })
    }
}
