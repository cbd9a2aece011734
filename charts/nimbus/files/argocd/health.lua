-- Argo CD health of the Nimbus kinds (SecurityIntent, SecurityIntentBinding,
-- ClusterSecurityIntentBinding, NimbusPolicy, ClusterNimbusPolicy), read from the kstatus
-- conditions the operator writes: Stalled=True is Degraded (a problem that only a change of
-- the object, or of what it refers to, fixes), Reconciling=True or a status older than the
-- spec is Progressing, Ready=True is Healthy.
local hs = { status = "Progressing", message = "Waiting for the Nimbus operator to report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.message = "Generation " .. generation .. " is not observed yet (status describes " .. observed .. ")"
  return hs
end
local found = {}
for _, condition in ipairs(obj.status.conditions) do
  found[condition.type] = condition
end
local function says(condition)
  local text = condition.reason or ""
  if condition.message ~= nil and condition.message ~= "" then
    text = text .. ": " .. condition.message
  end
  return text
end
local stalled, reconciling, ready = found["Stalled"], found["Reconciling"], found["Ready"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = says(stalled)
elseif reconciling ~= nil and reconciling.status == "True" then
  hs.message = says(reconciling)
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = says(ready)
elseif ready ~= nil then
  hs.message = says(ready)
end
return hs
