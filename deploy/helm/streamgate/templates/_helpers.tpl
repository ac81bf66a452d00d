{{/* The release's name prefix of every object, at most 63 characters. */}}
{{- define "streamgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the caller adds app.kubernetes.io/component. */}}
{{- define "streamgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector of one component: (dict "ctx" $ "component" "gateway"). */}}
{{- define "streamgate.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "streamgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Whether the gateways have a shared store. */}}
{{- define "streamgate.redis" -}}
{{- if or .Values.redis.enabled .Values.redis.url }}true{{ end -}}
{{- end -}}

{{/* The Secret holding Redis' password ("" when none). */}}
{{- define "streamgate.redisSecret" -}}
{{- if .Values.redis.passwordSecret.name -}}
{{ .Values.redis.passwordSecret.name }}
{{- else if .Values.redis.enabled -}}
{{ include "streamgate.fullname" . }}-redis
{{- end -}}
{{- end -}}

{{/* --redis: the bundled Redis' URL, or redis.url with the password
     ($(REDIS_PASSWORD), which Kubernetes expands from the container's env)
     put after the scheme unless the URL places it itself. */}}
{{- define "streamgate.redisURL" -}}
{{- $url := .Values.redis.url -}}
{{- if .Values.redis.enabled -}}
{{- $url = printf "redis://%s-redis:6379/0" (include "streamgate.fullname" .) -}}
{{- end -}}
{{- if and (include "streamgate.redisSecret" .) (not (contains "$(REDIS_PASSWORD)" $url)) -}}
{{- $url = regexReplaceAll "^(rediss?)://" $url "${1}://:$(REDIS_PASSWORD)@" -}}
{{- end -}}
{{ $url }}
{{- end -}}

{{/* --upstream of the gateways. */}}
{{- define "streamgate.upstream" -}}
{{- if .Values.gateway.upstream -}}
{{ .Values.gateway.upstream }}
{{- else if .Values.engine.enabled -}}
dns:///{{ include "streamgate.fullname" . }}-engine:{{ .Values.engine.grpcPort }}
{{- else if .Values.upstream.service.enabled -}}
dns:///{{ include "streamgate.fullname" . }}-upstream:{{ .Values.upstream.service.port }}
{{- else -}}
{{- fail "no upstream: set gateway.upstream (Triton's gRPC targets), engine.enabled or upstream.service" -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: preStop sleep, then the drain, then the
     process' own tail (drain.stopTailSeconds). */}}
{{- define "streamgate.terminationGrace" -}}
{{ add .Values.drain.preStopSeconds .Values.drain.shutdownGraceSeconds .Values.drain.stopTailSeconds }}
{{- end -}}

{{/* Pod and container security: distroless, user 65532, nothing writable
     but /tmp. */}}
{{- define "streamgate.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: { type: RuntimeDefault }
{{- end -}}
{{- define "streamgate.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: { drop: [ALL] }
{{- end -}}

{{/* Topology spread over zones and nodes: (dict "ctx" $ "component" "gateway"). */}}
{{- define "streamgate.spread" -}}
{{- range list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
- maxSkew: 1
  topologyKey: {{ . }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "streamgate.selector" $ | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Checks of values that would make flags streamgate refuses. */}}
{{- define "streamgate.validate" -}}
{{- if and .Values.redis.enabled .Values.redis.url -}}
{{- fail "redis.enabled and redis.url: give one (bundled or external Redis)" -}}
{{- end -}}
{{- if and .Values.keys.fileSecret (include "streamgate.redis" .) -}}
{{- fail "keys.fileSecret and Redis: with Redis the API keys are in Redis (streamgate keys create --redis)" -}}
{{- end -}}
{{- if and .Values.keys.fileSecret .Values.keys.disabled -}}
{{- fail "keys.fileSecret and keys.disabled: give one" -}}
{{- end -}}
{{- if and .Values.upstream.service.enabled (not .Values.upstream.service.selector) -}}
{{- fail "upstream.service.enabled needs upstream.service.selector (the labels of the Triton pods)" -}}
{{- end -}}
{{- if and (gt (int .Values.gateway.replicas) 1) (not (include "streamgate.redis" .)) .Values.keys.fileSecret -}}
{{- fail "keys.fileSecret with several gateway replicas: each would count its keys' limits alone; use Redis" -}}
{{- end -}}
{{- end -}}
