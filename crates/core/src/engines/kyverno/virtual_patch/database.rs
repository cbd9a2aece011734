//! The virtual-patch database as the operator reads it: `vp.json` (the format the
//! `virtual_patch` module describes) from the ConfigMap `--virtual-patch-db` names, or why it
//! cannot be used.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// ConfigMap key holding the database (same JSON format as Nimbus's vp.json).
pub const DATABASE_KEY: &str = "vp.json";

/// The virtual-patch database as the operator sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum VirtualPatches {
    /// No `--virtual-patch-db` was given.
    NotConfigured,
    /// The ConfigMap is missing or unusable; why, naming it.
    Invalid(String),
    Database(Database),
}

/// A parsed `vp.json`: a list of images.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(transparent)]
pub struct Database {
    pub images: Vec<Image>,
    /// Where it was read from (`namespace/name` of the ConfigMap), for messages.
    #[serde(skip)]
    pub source: String,
}

/// An image and the CVEs it has patches for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Image {
    pub image: String,
    #[serde(default)]
    pub cves: Vec<Cve>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Cve {
    pub cve: String,
    #[serde(default)]
    pub virtual_patch: Vec<Patch>,
}

/// One patch: complete native policies, by engine.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct Patch {
    #[serde(default)]
    pub karmor: Option<Value>,
    #[serde(default)]
    pub kyverno: Option<Value>,
    #[serde(default)]
    pub netpol: Option<Value>,
}

impl Database {
    /// Parses a `vp.json` document read from `source`.
    pub fn parse(source: &str, json: &str) -> Result<Self, serde_json::Error> {
        let mut db: Database = serde_json::from_str(json)?;
        db.source = source.to_owned();
        Ok(db)
    }
}

/// The database in ConfigMap `name` (`namespace/name`, for messages), whose data is `data`
/// (`None`: the ConfigMap does not exist).
pub fn from_config_map(name: &str, data: Option<&BTreeMap<String, String>>) -> VirtualPatches {
    let Some(data) = data else {
        return VirtualPatches::Invalid(format!("ConfigMap {name} not found"));
    };
    let Some(json) = data.get(DATABASE_KEY) else {
        return VirtualPatches::Invalid(format!("ConfigMap {name} has no key {DATABASE_KEY}"));
    };
    match Database::parse(name, json) {
        Ok(db) => VirtualPatches::Database(db),
        Err(e) => VirtualPatches::Invalid(format!(
            "ConfigMap {name}: {DATABASE_KEY} is not a valid virtual-patch database: {e}"
        )),
    }
}
