{{/* The name of the release's objects. */}}
{{- define "wsgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "wsgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels of every object; component is given as (list . "gateway"). */}}
{{- define "wsgate.labels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/part-of: wsgate
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version }}
{{- end -}}

{{- define "wsgate.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The checks of the values, run by every template that needs them. */}}
{{- define "wsgate.validate" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- fail "secrets.existingSecret is required: an existing Secret with the API key (and the JWT secret)" -}}
{{- end -}}
{{- if and .Values.autoscaler.enabled .Values.hpa.enabled -}}
{{- fail "autoscaler.enabled and hpa.enabled both set: choose one owner of the gateway's replica count" -}}
{{- end -}}
{{- $r := .Values.redis -}}
{{- $n := 0 -}}
{{- if $r.url }}{{ $n = add1 $n }}{{ end -}}
{{- if $r.existingSecret }}{{ $n = add1 $n }}{{ end -}}
{{- if $r.sentinel.enabled }}{{ $n = add1 $n }}{{ end -}}
{{- if ne (int $n) 1 -}}
{{- fail "set exactly one of redis.url, redis.existingSecret and redis.sentinel.enabled" -}}
{{- end -}}
{{- if and $r.sentinel.enabled (not $r.sentinel.addresses) -}}
{{- fail "redis.sentinel.addresses: at least one host:port" -}}
{{- end -}}
{{- end -}}

{{/* WSGATE_REDIS_URL (and the password it is built with), for every component. */}}
{{- define "wsgate.redisEnv" -}}
{{- $r := .Values.redis -}}
{{- if $r.existingSecret }}
- name: WSGATE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret }}
      key: {{ $r.urlKey }}
{{- else if $r.sentinel.enabled }}
{{- $auth := "" }}
{{- if $r.sentinel.passwordSecret.name }}
{{- $auth = ":$(REDIS_PASSWORD)@" }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.sentinel.passwordSecret.name }}
      key: {{ $r.sentinel.passwordSecret.key }}
{{- end }}
- name: WSGATE_REDIS_URL
  value: {{ printf "redis-sentinel://%s%s/%s?db=%d" $auth (join "," $r.sentinel.addresses) $r.sentinel.masterName (int $r.sentinel.db) | quote }}
{{- else }}
- name: WSGATE_REDIS_URL
  value: {{ $r.url | quote }}
{{- end }}
{{- end -}}

{{/* The secret files: the _FILE settings of the keys that are set. */}}
{{- define "wsgate.secretEnv" -}}
{{- $s := .Values.secrets -}}
- name: WSGATE_API_KEY_FILE
  value: {{ printf "%s/%s" $s.mountPath $s.apiKeyKey | quote }}
{{- if $s.jwtSecretKey }}
- name: WSGATE_JWT_SECRET_FILE
  value: {{ printf "%s/%s" $s.mountPath $s.jwtSecretKey | quote }}
{{- end }}
{{- end -}}

{{- define "wsgate.secretVolume" -}}
- name: secrets
  secret:
    secretName: {{ .Values.secrets.existingSecret }}
    defaultMode: 0440
{{- end -}}

{{- define "wsgate.secretMount" -}}
- name: secrets
  mountPath: {{ .Values.secrets.mountPath }}
  readOnly: true
{{- end -}}

{{- define "wsgate.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "wsgate.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}
