-- Argo CD health check for qwenfleet.io/QwenInference.
--
-- Install it in the argocd-cm ConfigMap (docs/helm.md shows the whole snippet):
--   resource.customizations.health.qwenfleet.io_QwenInference: |
--     <this file>
--
-- The operator writes kstatus conditions (Ready, Reconciling, Stalled) and observedGeneration, so:
--   status not yet written, or written for an older generation  -> Progressing
--   Stalled=True (the spec cannot be served as written)          -> Degraded
--   Ready=True                                                   -> Healthy
--   anything else (pods pending, rolling out, loading weights)   -> Progressing
-- Conditions that carry an observedGeneration older than the object's generation are stale and ignored.
-- Written for Lua 5.1 (Argo CD runs gopher-lua) with the base and string libraries only.

local hs = { status = "Progressing", message = "Waiting for the qwen-fleet operator to report status" }

if obj.status == nil then
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local function current(condition)
  return condition.observedGeneration == nil or generation == nil or condition.observedGeneration == generation
end

local ready = nil
local stalled = nil
for _, condition in ipairs(obj.status.conditions or {}) do
  if current(condition) then
    if condition.type == "Ready" then
      ready = condition
    elseif condition.type == "Stalled" then
      stalled = condition
    end
  end
end

local function describe(condition)
  local reason = condition.reason or ""
  local message = condition.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  end
  return reason .. message
end

if stalled ~= nil and stalled.status == "True" then
  return { status = "Degraded", message = describe(stalled) }
end
if ready ~= nil and ready.status == "True" then
  return { status = "Healthy", message = describe(ready) }
end
if ready ~= nil then
  hs.message = describe(ready)
end
return hs
