//! virtualPatch (Kyverno engine): placeholder, being written.

use super::{Environment, Output, PolicyInput, Rule};
use std::collections::BTreeMap;

pub const INTENT: &str = "virtualPatch";

#[derive(Debug, Clone, PartialEq)]
pub enum VirtualPatches {
    NotConfigured,
}

pub fn from_config_map(_name: &str, _data: Option<&BTreeMap<String, String>>) -> VirtualPatches {
    VirtualPatches::NotConfigured
}

pub(super) fn translate(_policy: &PolicyInput, _rule: &Rule, _env: &Environment) -> Output {
    Ok(Vec::new())
}
