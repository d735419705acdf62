//! Reads one TOML table field by field, so every error names the file, the
//! entry and the field, and unknown keys (typos) are rejected instead of
//! silently ignored.

use crate::error::{PlanError, Result};
use std::cell::RefCell;
use std::collections::BTreeSet;
use toml::{Table, Value};
use tpcomm::ByteSize;

pub(crate) struct Fields<'a> {
    file: &'a str,
    entry: String,
    /// Path of a nested table inside the entry ("attention."), for error messages.
    prefix: String,
    table: &'a Table,
    used: RefCell<BTreeSet<String>>,
}

impl<'a> Fields<'a> {
    /// `entry` is taken from the table's `name` key (which must be a string).
    pub fn new(file: &'a str, index: usize, kind: &str, table: &'a Table) -> Result<Self> {
        let mut f = Fields {
            file,
            entry: format!("{kind} #{}", index + 1),
            prefix: String::new(),
            table,
            used: RefCell::new(BTreeSet::new()),
        };
        f.entry = f.string("name")?;
        Ok(f)
    }

    pub fn entry(&self) -> &str {
        &self.entry
    }

    pub fn err(&self, field: &str, problem: impl Into<String>) -> PlanError {
        PlanError::Field {
            file: self.file.to_string(),
            line: None,
            entry: self.entry.clone(),
            field: format!("{}{field}", self.prefix),
            problem: problem.into(),
        }
    }

    fn get(&self, field: &str) -> Option<&'a Value> {
        self.used.borrow_mut().insert(field.to_string());
        self.table.get(field)
    }

    fn required(&self, field: &str) -> Result<&'a Value> {
        self.get(field)
            .ok_or_else(|| self.err(field, "missing (this field is required)"))
    }

    pub fn string(&self, field: &str) -> Result<String> {
        match self.required(field)? {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            Value::String(_) => Err(self.err(field, "is empty")),
            other => Err(self.err(
                field,
                format!("must be a string, found {}", other.type_str()),
            )),
        }
    }

    pub fn opt_string(&self, field: &str) -> Result<Option<String>> {
        self.optional(field, Self::string)
    }

    /// `get` of `field` when the table has it, else `None` (the field
    /// counted as used either way).
    fn optional<T>(&self, field: &str, get: fn(&Self, &str) -> Result<T>) -> Result<Option<T>> {
        if self.table.contains_key(field) {
            get(self, field).map(Some)
        } else {
            self.used.borrow_mut().insert(field.to_string());
            Ok(None)
        }
    }

    /// A strictly positive integer.
    pub fn pos(&self, field: &str) -> Result<u64> {
        match self.required(field)? {
            Value::Integer(n) if *n > 0 => Ok(*n as u64),
            Value::Integer(n) => Err(self.err(field, format!("must be positive, found {n}"))),
            other => Err(self.err(
                field,
                format!("must be a positive integer, found {}", other.type_str()),
            )),
        }
    }

    pub fn opt_pos(&self, field: &str) -> Result<Option<u64>> {
        self.optional(field, Self::pos)
    }

    /// A non-negative integer, 0 when absent.
    pub fn count_or_zero(&self, field: &str) -> Result<u64> {
        match self.get(field) {
            None => Ok(0),
            Some(Value::Integer(n)) if *n >= 0 => Ok(*n as u64),
            Some(Value::Integer(n)) => {
                Err(self.err(field, format!("must not be negative, found {n}")))
            }
            Some(other) => Err(self.err(
                field,
                format!("must be a non-negative integer, found {}", other.type_str()),
            )),
        }
    }

    pub fn bool_or(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(self.err(
                field,
                format!("must be true or false, found {}", other.type_str()),
            )),
        }
    }

    /// A strictly positive, finite number (integers accepted).
    pub fn pos_f64(&self, field: &str) -> Result<f64> {
        let v = self.required(field)?;
        self.to_pos_f64(field, v)
    }

    /// `v` as a number (integers accepted).
    fn number(&self, field: &str, v: &Value) -> Result<f64> {
        match v {
            Value::Float(x) => Ok(*x),
            Value::Integer(n) => Ok(*n as f64),
            other => Err(self.err(
                field,
                format!("must be a number, found {}", other.type_str()),
            )),
        }
    }

    fn to_pos_f64(&self, field: &str, v: &Value) -> Result<f64> {
        let x = self.number(field, v)?;
        if !x.is_finite() || x <= 0.0 {
            return Err(self.err(field, format!("must be a positive number, found {x}")));
        }
        Ok(x)
    }

    /// A finite number at or above zero (integers accepted).
    pub fn nonneg_f64(&self, field: &str) -> Result<f64> {
        let x = self.number(field, self.required(field)?)?;
        if !x.is_finite() || x < 0.0 {
            return Err(self.err(field, format!("must be a number >= 0, found {x}")));
        }
        Ok(x)
    }

    /// A byte size: a positive integer of bytes or a string such as "80 GB".
    pub fn bytes(&self, field: &str) -> Result<ByteSize> {
        let b = match self.required(field)? {
            Value::Integer(n) if *n > 0 => ByteSize::b(*n as u64),
            Value::Integer(n) => {
                return Err(self.err(field, format!("must be positive, found {n}")))
            }
            Value::String(s) => s
                .parse::<ByteSize>()
                .map_err(|e| self.err(field, e.to_string()))?,
            other => {
                return Err(self.err(
                    field,
                    format!(
                        "must be a byte size such as \"80 GB\", found {}",
                        other.type_str()
                    ),
                ))
            }
        };
        if b == ByteSize::ZERO {
            return Err(self.err(field, "must be positive"));
        }
        Ok(b)
    }

    /// A non-empty list of positive numbers.
    pub fn pos_f64_list(&self, field: &str) -> Result<Vec<f64>> {
        match self.required(field)? {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(i, v)| self.to_pos_f64(&format!("{field}[{i}]"), v))
                .collect(),
            Value::Array(_) => Err(self.err(field, "is an empty list")),
            other => Err(self.err(field, format!("must be a list, found {}", other.type_str()))),
        }
    }

    /// A list of tables (e.g. the rows of a latency table).
    pub fn tables(&self, field: &str) -> Result<Vec<&'a Table>> {
        match self.required(field)? {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_table()
                        .ok_or_else(|| self.err(&format!("{field}[{i}]"), "must be a table"))
                })
                .collect(),
            Value::Array(_) => Err(self.err(field, "is an empty list")),
            other => Err(self.err(field, format!("must be a list, found {}", other.type_str()))),
        }
    }

    /// Whether the table has `field` (marking it as read).
    pub fn has(&self, field: &str) -> bool {
        self.get(field).is_some()
    }

    /// Fails on any key that was never asked for: a typo must not pass silently.
    pub fn finish(&self) -> Result<()> {
        let used = self.used.borrow();
        for key in self.table.keys() {
            if !used.contains(key) {
                return Err(self.err(key, "unknown field (misspelt?)"));
            }
        }
        Ok(())
    }

    /// A nested reader for a sub-table, reporting errors as `parent.field`.
    pub fn sub(&self, field: &str) -> Result<Option<Fields<'a>>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(Fields {
                file: self.file,
                entry: self.entry.clone(),
                prefix: format!("{}{field}.", self.prefix),
                table: t,
                used: RefCell::new(BTreeSet::new()),
            })),
            Some(other) => Err(self.err(
                field,
                format!("must be a table, found {}", other.type_str()),
            )),
        }
    }

    /// Same as `sub` for a table inside a list, keeping the entry name.
    pub fn child(&self, label: &str, table: &'a Table) -> Fields<'a> {
        Fields {
            file: self.file,
            entry: self.entry.clone(),
            prefix: format!("{}{label}.", self.prefix),
            table,
            used: RefCell::new(BTreeSet::new()),
        }
    }
}
