//! Label and field selectors of one request, parsed against the type's selectable fields.

use std::sync::Arc;

use strata_object::{FieldSelector, LabelSelector, ResourceType, Status};
use strata_watch::{CachedObject, Filter};

/// The selectors of a list, watch or deletecollection.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    /// Parses `labelSelector` and `fieldSelector`; a malformed one is 400.
    pub fn parse(info: &ResourceType, labels: &str, fields: &str) -> Result<Self, Status> {
        let labels = LabelSelector::parse(labels).map_err(Status::bad_request)?;
        let fields =
            FieldSelector::parse(fields, &info.selectable_fields, info.unknown_field_style)
                .map_err(Status::bad_request)?;
        Ok(Self { labels, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, obj: &CachedObject) -> bool {
        self.labels.matches_with(|k| obj.label(k)) && self.fields.matches_with(|f| obj.field(f))
    }

    /// The selection as a cache filter.
    pub fn filter(&self) -> Filter {
        if self.is_empty() {
            return Arc::new(|_| true);
        }
        let this = self.clone();
        Arc::new(move |o| this.matches(o))
    }
}
