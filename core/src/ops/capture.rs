//! A stored delivery taken out whole (`replaysafe deliveries export`,
//! `GET /api/v1/deliveries/{id}/export`): headers and the exact body, which
//! the dashboard masks, so admin only and audit-logged. `replaysafe prove
//! --from-file` sends it to a handler without a running replaysafe.

use base64::Engine as _;
use replaysafe_types::auth::Role;
use replaysafe_types::stream::{CapturedDelivery, CAPTURED_FORMAT};
use replaysafe_types::time::Time;

use super::{Cx, OpError};
use crate::providers::Inbound;

pub async fn export_delivery(cx: &Cx, id: i64) -> Result<CapturedDelivery, OpError> {
    let admin = cx.require(Role::Admin)?;
    let pool = &cx.services.pool;
    let row = crate::db::history::by_delivery_id(pool, id, |lo, hi| {
        sqlx::query!(
            r#"SELECT d.id, d.received_at AS "received_at!: Time", d.source, d.event_id,
                      d.idem_key, d.method, d.query, d.content_type, d.headers, d.body,
                      d.truncated
               FROM deliveries d
               WHERE d.id = $1
                 AND d.received_at >= coalesce($2::timestamptz, '-infinity')
                 AND d.received_at < coalesce($3::timestamptz, 'infinity')"#,
            id,
            lo as _,
            hi as _
        )
        .fetch_optional(pool)
    })
    .await?
    .ok_or_else(|| OpError::not_found("delivery"))?;
    let headers = Inbound::stored_headers(&row.headers);
    let source = cx.services.config.source(&row.source);
    let forwarded_headers = source.map_or_else(Vec::new, |s| {
        crate::processing::forward::event_headers(s.provider, Some(&row.headers))
    });
    let event_type = match (source, &row.body) {
        (Some(s), Some(body)) => s.provider.event_type(&Inbound {
            query: row.query.clone(),
            headers: headers.clone(),
            body: body.clone(),
            remote_addr: None,
        }),
        _ => None,
    };
    cx.audit(
        admin,
        "delivery.export",
        Some(&id.to_string()),
        "succeeded",
        serde_json::json!({ "source": row.source }),
    )
    .await?;
    Ok(CapturedDelivery {
        format: CAPTURED_FORMAT.to_owned(),
        delivery_id: row.id,
        idempotency_key: row.idem_key.as_ref().map(|k| format!("{}:{k}", row.source)),
        source: row.source,
        event_id: row.event_id,
        key: row.idem_key,
        event_type,
        received_at: row.received_at,
        method: row.method,
        query: row.query,
        content_type: row.content_type,
        headers,
        forwarded_headers,
        body_base64: row
            .body
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
        truncated: row.truncated,
    })
}
