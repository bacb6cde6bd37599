use leptos::prelude::*;
use replaysafe_types::time::shown;

use crate::api::tokens::{list_tokens, RevokeToken, TokenRow};
use crate::components::*;

/// API tokens (admin): who may call `/api/v1` and the CLI, with which role,
/// when each was last used; revoking one refuses it from its next request.
/// Tokens are made on the command line, where one is shown once.
#[component]
pub fn TokensPage() -> impl IntoView {
    let revoke = ServerAction::<RevokeToken>::new();
    let data = Resource::new(move || revoke.version().get(), |_| list_tokens());
    view! {
        <section class="page">
            <h1>"API tokens"</h1>
            <p class="lede">
                "Scripts, bots and the " <code>"replaysafe"</code> " command line call " <code>"/api/v1"</code>
                " with one of these. Make one with " <code>"replaysafe token create --name N --role viewer|operator|admin"</code>
                "; it is shown once. What a token does is in the audit log under its name."
            </p>
            {move || revoke.value().get().map(|r| match r {
                Ok(t) => view! { <p class="result ok" role="status">{format!("Token {} revoked.", t.name)}</p> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            <Transition fallback=|| view! { <p class="muted">"Loading tokens…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(rows) => view! { <TokenTable rows revoke/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn TokenTable(rows: Vec<TokenRow>, revoke: ServerAction<RevokeToken>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">"No tokens yet."</p> }.into_any();
    }
    view! {
        <table class="data" data-testid="tokens-table">
            <thead>
                <tr>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Role"</th>
                    <th scope="col">"Prefix"</th>
                    <th scope="col">"Created (UTC)"</th>
                    <th scope="col">"Last used"</th>
                    <th scope="col">"Expires"</th>
                    <th scope="col">"State"</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|t| {
                    let live = t.state == replaysafe_types::states::TokenState::Live;
                    let (name, state) = (t.name.clone(), t.state.as_str());
                    let label = format!("Revoke {name}");
                    view! {
                        <tr data-token=name data-state=state>
                            <td>{t.name}</td>
                            <td>{t.role}</td>
                            <td><code>{t.prefix} "…"</code></td>
                            <td>{shown(&t.created_at)}<div class="muted small">{t.created_by.unwrap_or_default()}</div></td>
                            <td>{t.last_used_at.as_ref().map_or_else(|| "never".into(), shown)}</td>
                            <td>{t.expires_at.as_ref().map_or_else(|| "never".into(), shown)}</td>
                            <td>{t.state.as_str()}</td>
                            <td>{live.then(|| view! {
                                <ActionForm action=revoke attr:class="inline">
                                    <input type="hidden" name="id" value=t.id/>
                                    <button type="submit" class="danger" aria-label=label.clone()>"Revoke"</button>
                                </ActionForm>
                            })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
